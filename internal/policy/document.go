package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/sharedos/sharedos/internal/config"
)

// Document is the whole policy, in the form of cluster.yaml's policy
// sections: a document written by Export is a fragment of a cluster.yaml,
// and those sections of a cluster.yaml are a document Import takes.
type Document struct {
	Principals         []config.Principal         `yaml:"principals"`
	CredentialProfiles []config.CredentialProfile `yaml:"credential_profiles"`
	Providers          []config.Provider          `yaml:"providers"`
	Identities         []config.Identity          `yaml:"identities"`
	Approvals          []config.ApprovalRule      `yaml:"approvals"`
}

// Bounds on what is decoded from outside the node: checked before any
// decoding.
const (
	// MaxValueBytes bounds one item (a stored value, a put).
	MaxValueBytes = 256 << 10
	// MaxDocumentBytes bounds a document (an import, a diff).
	MaxDocumentBytes = 16 << 20
	// MaxItems bounds the items of a document.
	MaxItems = 65536
)

// ErrTooLarge is wrapped when input exceeds a bound.
var ErrTooLarge = errors.New("policy: too large")

// FromConfig is the policy sections of c: the identities it lists (not
// the implicit ones a node adds), every principal, binding and provider.
func FromConfig(c *config.Config) Document {
	return Document{
		Principals: slices.Clone(c.Principals), CredentialProfiles: slices.Clone(c.CredentialProfiles),
		Providers: slices.Clone(c.Providers), Identities: slices.Clone(c.Identities),
		Approvals: slices.Clone(c.Approvals),
	}
}

// Apply returns c with d as its policy sections.
func (d Document) Apply(c *config.Config) *config.Config {
	out := *c
	out.Principals, out.CredentialProfiles, out.Providers, out.Identities = d.Principals, d.CredentialProfiles, d.Providers, d.Identities
	out.Approvals = d.Approvals
	return &out
}

// Validate checks d exactly as cluster.yaml's policy sections are
// checked (config.Validate, and the identities as the node indexes them),
// in a configuration whose other sections are the defaults: what a policy
// may hold does not depend on a node's listeners or paths.
func (d Document) Validate() error {
	base, err := config.Parse(nil)
	if err != nil {
		return err
	}
	c := d.Apply(base)
	if err := c.Validate(); err != nil {
		return err
	}
	if _, err := c.IdentitySet(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// ParseDocument decodes a document in YAML or JSON (JSON is YAML),
// strictly: a field a section does not have is an error.
func ParseDocument(b []byte) (Document, error) {
	var d Document
	if len(b) > MaxDocumentBytes {
		return d, fmt.Errorf("%w: a document of %d bytes, more than %d", ErrTooLarge, len(b), MaxDocumentBytes)
	}
	if err := yaml.UnmarshalWithOptions(b, &d, yaml.Strict()); err != nil {
		return d, fmt.Errorf("policy: document: %w", err)
	}
	if n := len(d.Principals) + len(d.CredentialProfiles) + len(d.Providers) + len(d.Identities) + len(d.Approvals); n > MaxItems {
		return d, fmt.Errorf("%w: %d items, more than %d", ErrTooLarge, n, MaxItems)
	}
	return d, nil
}

// Marshal writes d as YAML, or as JSON when asJSON.
func (d Document) Marshal(asJSON bool) ([]byte, error) {
	if asJSON {
		return yaml.MarshalWithOptions(d, yaml.JSON())
	}
	return yaml.Marshal(d)
}

// Items are d's items, each under its key in canonical form (Canonical).
// Two items under one key are an error, as two in a cluster.yaml are.
func (d Document) Items() (map[Key][]byte, error) {
	out := map[Key][]byte{}
	add := func(k Key, v any) error {
		if _, dup := out[k]; dup {
			return fmt.Errorf("policy: %s is listed twice", k)
		}
		b, err := canonical(v)
		if err != nil {
			return fmt.Errorf("policy: %s: %w", k, err)
		}
		out[k] = b
		return nil
	}
	for _, p := range d.Principals {
		if err := add(Key{Kind: Grants, Tenant: p.Tenant, Name: p.Principal}, normalGrants(p)); err != nil {
			return nil, err
		}
	}
	for _, c := range d.CredentialProfiles {
		if err := add(Key{Kind: Credentials, Tenant: c.Tenant, Name: c.Profile}, c); err != nil {
			return nil, err
		}
	}
	for _, p := range d.Providers {
		if err := add(Key{Kind: Providers, Name: p.ID}, p); err != nil {
			return nil, err
		}
	}
	for _, id := range d.Identities {
		if err := add(Key{Kind: Identities, Name: id.Name}, id); err != nil {
			return nil, err
		}
	}
	for _, r := range d.Approvals {
		if err := add(Key{Kind: Approvals, Tenant: r.Tenant, Name: r.Name}, r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// normalGrants writes a principal's grant windows in UTC: the same
// instant is the same value whatever offset it was written with.
func normalGrants(p config.Principal) config.Principal {
	p.Grants = slices.Clone(p.Grants)
	for i := range p.Grants {
		p.Grants[i].NotBefore, p.Grants[i].ExpiresAt = utc(p.Grants[i].NotBefore), utc(p.Grants[i].ExpiresAt)
	}
	return p
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// canonical is v as compact JSON with the configuration's field names, map
// keys sorted: the form values are stored, hashed and compared in. It is
// taken after one decoding round trip, at which the encoding is a fixed
// point (decoding and encoding it again gives the same bytes).
func canonical(v any) ([]byte, error) {
	b, err := yaml.MarshalWithOptions(v, yaml.JSON())
	if err != nil {
		return nil, err
	}
	fresh := reflect.New(reflect.TypeOf(v))
	if err := yaml.Unmarshal(b, fresh.Interface()); err != nil {
		return nil, err
	}
	if b, err = yaml.MarshalWithOptions(fresh.Elem().Interface(), yaml.JSON()); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// DecodeItem decodes the value of key k (YAML or JSON, strictly), checks
// that it names the same item as its key, and returns it in canonical
// form.
func DecodeItem(k Key, b []byte) ([]byte, error) {
	if len(b) > MaxValueBytes {
		return nil, fmt.Errorf("%w: a value of %d bytes, more than %d", ErrTooLarge, len(b), MaxValueBytes)
	}
	var d Document
	var named Key
	var err error
	switch k.Kind {
	case Grants:
		var v config.Principal
		err = yaml.UnmarshalWithOptions(b, &v, yaml.Strict())
		d.Principals, named = []config.Principal{v}, Key{Kind: Grants, Tenant: v.Tenant, Name: v.Principal}
	case Credentials:
		var v config.CredentialProfile
		err = yaml.UnmarshalWithOptions(b, &v, yaml.Strict())
		d.CredentialProfiles, named = []config.CredentialProfile{v}, Key{Kind: Credentials, Tenant: v.Tenant, Name: v.Profile}
	case Providers:
		var v config.Provider
		err = yaml.UnmarshalWithOptions(b, &v, yaml.Strict())
		d.Providers, named = []config.Provider{v}, Key{Kind: Providers, Name: v.ID}
	case Identities:
		var v config.Identity
		err = yaml.UnmarshalWithOptions(b, &v, yaml.Strict())
		d.Identities, named = []config.Identity{v}, Key{Kind: Identities, Name: v.Name}
	case Approvals:
		var v config.ApprovalRule
		err = yaml.UnmarshalWithOptions(b, &v, yaml.Strict())
		d.Approvals, named = []config.ApprovalRule{v}, Key{Kind: Approvals, Tenant: v.Tenant, Name: v.Name}
	default:
		return nil, fmt.Errorf("%w: kind %q", ErrInvalidKey, k.Kind)
	}
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", k, err)
	}
	if named != k {
		return nil, fmt.Errorf("policy: the value names %s, not its key %s", named, k)
	}
	items, err := d.Items()
	if err != nil {
		return nil, err
	}
	return items[k], nil
}

// DocumentOf assembles a document from canonical items, each section in
// key order.
func DocumentOf(items map[Key][]byte) (Document, error) {
	keys := make([]Key, 0, len(items))
	for k := range items {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b Key) int { return strings.Compare(a.String(), b.String()) })
	var d Document
	for _, k := range keys {
		var err error
		b := items[k]
		switch k.Kind {
		case Grants:
			var v config.Principal
			err = yaml.Unmarshal(b, &v)
			d.Principals = append(d.Principals, v)
		case Credentials:
			var v config.CredentialProfile
			err = yaml.Unmarshal(b, &v)
			d.CredentialProfiles = append(d.CredentialProfiles, v)
		case Providers:
			var v config.Provider
			err = yaml.Unmarshal(b, &v)
			d.Providers = append(d.Providers, v)
		case Identities:
			var v config.Identity
			err = yaml.Unmarshal(b, &v)
			d.Identities = append(d.Identities, v)
		case Approvals:
			var v config.ApprovalRule
			err = yaml.Unmarshal(b, &v)
			d.Approvals = append(d.Approvals, v)
		}
		if err != nil {
			return Document{}, fmt.Errorf("policy: %s: %w", k, err)
		}
	}
	return d, nil
}

// Hash is the content hash of a canonical value: hex SHA-256 ("" for none).
func Hash(canonical []byte) string {
	if canonical == nil {
		return ""
	}
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

// Op is what a change does to its key.
type Op string

// The changes.
const (
	Add    Op = "add"
	Change Op = "change"
	Remove Op = "remove"
)

// A Diff entry: what making the store hold a document would do to Key.
type Diff struct {
	Key Key `json:"-"`
	Op  Op  `json:"op"`
	// Revision is the key's current revision (0 for an add): an import
	// writes the change only if the key is still at it.
	Revision uint64 `json:"revision"`
	From     []byte `json:"-"`
	To       []byte `json:"-"`
}

// Compare lists what turning items from into to changes, in key order.
// revs are from's revisions.
func Compare(from map[Key][]byte, revs map[Key]uint64, to map[Key][]byte) []Diff {
	var out []Diff
	for k, b := range to {
		old, ok := from[k]
		switch {
		case !ok:
			out = append(out, Diff{Key: k, Op: Add, To: b})
		case !bytes.Equal(old, b):
			out = append(out, Diff{Key: k, Op: Change, Revision: revs[k], From: old, To: b})
		}
	}
	for k, b := range from {
		if _, ok := to[k]; !ok {
			out = append(out, Diff{Key: k, Op: Remove, Revision: revs[k], From: b})
		}
	}
	slices.SortFunc(out, func(a, b Diff) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	return out
}

// ItemOf is the item a canonical value of key k holds, as its
// configuration type (config.Principal, CredentialProfile, Provider,
// Identity or ApprovalRule): what to print for an operator, in cluster.yaml's field order.
func ItemOf(k Key, canonical []byte) (any, error) {
	d, err := DocumentOf(map[Key][]byte{k: canonical})
	if err != nil {
		return nil, err
	}
	switch k.Kind {
	case Grants:
		return d.Principals[0], nil
	case Credentials:
		return d.CredentialProfiles[0], nil
	case Providers:
		return d.Providers[0], nil
	case Identities:
		return d.Identities[0], nil
	case Approvals:
		return d.Approvals[0], nil
	}
	return nil, fmt.Errorf("%w: kind %q", ErrInvalidKey, k.Kind)
}
