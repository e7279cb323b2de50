package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file holds the format of a node's signed checkpoints: the document,
// its signature and parsing, and the key files (a node's Ed25519 private
// key, trusted public keys). The Checkpointer that tracks what a node
// wrote and publishes checkpoints is internal/auditstore's; the verifier's
// side is in verify.go; the format is specified in docs/audit.md.

// CheckpointType is the "type" of a checkpoint record. Checkpoints share
// the audit stream with events but are not events: they belong to no turn.
const CheckpointType Type = "audit.checkpoint"

// CheckpointVersion is the checkpoint format version ("v").
const CheckpointVersion = 1

// Checkpoint is a node's signed statement about the events it wrote.
//
// Each node keeps one chain of checkpoints: Seq counts from 0 and PrevHash
// is the hex SHA-256 of the previous checkpoint's exact record bytes
// (signature included), "" for seq 0. Turns lists, for every turn that
// received events since the previous checkpoint, the turn's head at the
// time: its last sequence number and that event's hash. Because the
// checkpoints chain, the union of their Turns attests every turn head the
// node ever wrote, so a verifier can tell when a turn's events up to an
// attested head are missing.
type Checkpoint struct {
	Type Type   `json:"type"`
	V    int    `json:"v"`
	Node string `json:"node"`
	// Seq numbers the node's checkpoints from 0.
	Seq      uint64    `json:"seq"`
	PrevHash string    `json:"prev_hash"`
	Time     time.Time `json:"time"`
	// KeyID is KeyID(public key); PublicKey is the hex Ed25519 public key
	// the checkpoint is signed with.
	KeyID     string `json:"key_id"`
	PublicKey string `json:"public_key"`
	// Events is the number of events the node handed to the audit stream
	// since its checkpoint chain began (across restarts).
	Events uint64     `json:"events"`
	Turns  []TurnHead `json:"turns"`
}

// TurnHead is the head of one turn's chain as the node wrote it.
type TurnHead struct {
	TurnID string `json:"turn_id"`
	Tenant string `json:"tenant"`
	// Seq is the turn's last event's sequence number, Hash that event's
	// record hash.
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
	// Closed says the event at Seq is turn.closed: the chain ends there.
	Closed bool `json:"closed,omitempty"`
}

// CheckpointSubject is the subject node publishes its checkpoints on:
// "<prefix>.audit.checkpoint.<node>". Checkpoints are stored as they are,
// one per message, next to the segments ("<prefix>.audit.seg.<tenant>");
// a segment filter never matches them.
func CheckpointSubject(prefix, node string) string {
	return prefix + ".audit.checkpoint." + node
}

// IsCheckpoint reports whether data is a checkpoint record in its canonical
// form (it starts with the checkpoint type). A record that is not in the
// canonical form is judged as an event and fails there.
func IsCheckpoint(data []byte) bool {
	return bytes.HasPrefix(data, checkpointPrefix)
}

var checkpointPrefix = []byte(`{"type":"` + string(CheckpointType) + `"`)

const sigMember = `,"sig":"`

// appendCheckpoint writes cp's canonical, unsigned form: compact JSON in
// field order, the bytes encoding/json gives for Checkpoint (with Turns
// written as [] when empty). These are the signed bytes.
func appendCheckpoint(b []byte, cp *Checkpoint) []byte {
	b = append(b, `{"type":`...)
	b = appendString(b, string(cp.Type))
	b = append(b, `,"v":`...)
	b = strconv.AppendInt(b, int64(cp.V), 10)
	b = append(b, `,"node":`...)
	b = appendString(b, cp.Node)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, cp.Seq, 10)
	b = append(b, `,"prev_hash":`...)
	b = appendString(b, cp.PrevHash)
	b = append(b, `,"time":`...)
	b = appendTime(b, cp.Time)
	b = append(b, `,"key_id":`...)
	b = appendString(b, cp.KeyID)
	b = append(b, `,"public_key":`...)
	b = appendString(b, cp.PublicKey)
	b = append(b, `,"events":`...)
	b = strconv.AppendUint(b, cp.Events, 10)
	b = append(b, `,"turns":[`...)
	for i, t := range cp.Turns {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"turn_id":`...)
		b = appendString(b, t.TurnID)
		b = append(b, `,"tenant":`...)
		b = appendString(b, t.Tenant)
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, t.Seq, 10)
		b = append(b, `,"hash":`...)
		b = appendString(b, t.Hash)
		if t.Closed {
			b = append(b, `,"closed":true`...)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// SignCheckpoint fills cp's Type, V, KeyID and PublicKey from key, and
// returns the checkpoint record: the canonical unsigned form with a last
// member "sig", the hex Ed25519 signature of the unsigned form.
func SignCheckpoint(cp *Checkpoint, key ed25519.PrivateKey) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("audit: sign checkpoint: not an Ed25519 private key")
	}
	if y := cp.Time.Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("audit: sign checkpoint: time %s is outside years 0-9999", cp.Time)
	}
	pub := key.Public().(ed25519.PublicKey)
	cp.Type, cp.V = CheckpointType, CheckpointVersion
	cp.KeyID, cp.PublicKey = KeyID(pub), hex.EncodeToString(pub)
	body := appendCheckpoint(make([]byte, 0, 512+len(cp.Turns)*192), cp)
	sig := ed25519.Sign(key, body)
	rec := append(body[:len(body)-1], sigMember...)
	rec = hex.AppendEncode(rec, sig)
	return append(rec, `"}`...), nil
}

// ParsedCheckpoint is a checkpoint record taken apart.
type ParsedCheckpoint struct {
	Checkpoint
	// Body is the signed bytes: the record without its "sig" member.
	Body []byte
	Sig  []byte
	// Hash is HashData of the whole record: the next checkpoint's PrevHash.
	Hash string
}

// ParseCheckpoint takes a checkpoint record apart without checking its
// signature (see ParsedCheckpoint.VerifySignature). It fails for a record
// that is not exactly a canonical checkpoint followed by its signature.
func ParseCheckpoint(data []byte) (*ParsedCheckpoint, error) {
	i := bytes.LastIndex(data, []byte(sigMember))
	if i < 0 || !bytes.HasSuffix(data, []byte(`"}`)) {
		return nil, errors.New("audit: checkpoint: no trailing \"sig\" member")
	}
	sigHex := data[i+len(sigMember) : len(data)-2]
	if len(sigHex) != 2*ed25519.SignatureSize {
		return nil, fmt.Errorf("audit: checkpoint: signature is %d hex digits, want %d", len(sigHex), 2*ed25519.SignatureSize)
	}
	p := &ParsedCheckpoint{Sig: make([]byte, ed25519.SignatureSize), Hash: HashData(data)}
	if _, err := hex.Decode(p.Sig, sigHex); err != nil {
		return nil, fmt.Errorf("audit: checkpoint: signature: %w", err)
	}
	p.Body = append(slices.Clip(data[:i]), '}')
	dec := json.NewDecoder(bytes.NewReader(p.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p.Checkpoint); err != nil {
		return nil, fmt.Errorf("audit: checkpoint: %w", err)
	}
	switch {
	case p.Type != CheckpointType:
		return nil, fmt.Errorf("audit: checkpoint: type %q", p.Type)
	case p.V != CheckpointVersion:
		return nil, fmt.Errorf("audit: checkpoint: version %d, this verifier reads %d", p.V, CheckpointVersion)
	case !bytes.Equal(appendCheckpoint(nil, &p.Checkpoint), p.Body):
		// Only the canonical form is accepted, so what was signed has one
		// reading (no duplicate keys, no alternative encodings).
		return nil, errors.New("audit: checkpoint: not in canonical form")
	}
	return p, nil
}

// PublicKeyBytes decodes the embedded public key.
func (p *ParsedCheckpoint) PublicKeyBytes() (ed25519.PublicKey, error) {
	pub, err := hex.DecodeString(p.PublicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("audit: checkpoint: public_key is not a hex Ed25519 public key")
	}
	return pub, nil
}

// VerifySignature checks the signature with pub, which must also be the
// key the checkpoint names (key_id and public_key).
func (p *ParsedCheckpoint) VerifySignature(pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize {
		return errors.New("audit: checkpoint: not an Ed25519 public key")
	}
	if p.KeyID != KeyID(pub) || p.PublicKey != hex.EncodeToString(pub) {
		return fmt.Errorf("audit: checkpoint names key %s, not %s", p.KeyID, KeyID(pub))
	}
	if !ed25519.Verify(pub, p.Body, p.Sig) {
		return errors.New("audit: checkpoint: bad signature")
	}
	return nil
}

// ---- keys ----

// KeyID identifies a public key: the first 16 bytes of its SHA-256, hex.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:16])
}

// ReadPrivateKey reads an Ed25519 private key file (PEM, PKCS #8). The
// error wraps fs.ErrNotExist when there is none.
func ReadPrivateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit: key file: %w", err)
	}
	if runtime.GOOS != "windows" {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("audit: key file %s has mode %v: it must not be accessible to group or others (chmod 600)", path, st.Mode().Perm())
		}
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("audit: key file %s: want a PEM \"PRIVATE KEY\" block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("audit: key file %s: %w", path, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("audit: key file %s: %T is not an Ed25519 key", path, k)
	}
	return key, nil
}

// ParsePublicKeys reads trusted public keys: PEM "PUBLIC KEY" blocks
// (PKIX), the JSON `node audit keys --local` prints
// ({"keys":[{"public_key":…}]}), or lines each holding a hex Ed25519
// public key ('#' starts a comment; other words on a line, such as a node
// name, are ignored). In the JSON, an entry's key_id, when present, must
// be its key's, and an entry whose source is "stream" (a key a checkpoint
// claims, which anyone who can write the stream can choose) is refused:
// a trusted key is read from the node.
func ParsePublicKeys(data []byte) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	add := func(pub ed25519.PublicKey) {
		if !slices.ContainsFunc(keys, func(k ed25519.PublicKey) bool { return k.Equal(pub) }) {
			keys = append(keys, pub)
		}
	}
	trimmed := bytes.TrimSpace(data)
	switch {
	case bytes.HasPrefix(trimmed, []byte("-----BEGIN")):
		for rest := trimmed; ; {
			var blk *pem.Block
			blk, rest = pem.Decode(rest)
			if blk == nil {
				break
			}
			if blk.Type != "PUBLIC KEY" {
				return nil, fmt.Errorf("audit: trusted keys: PEM block %q, want \"PUBLIC KEY\"", blk.Type)
			}
			k, err := x509.ParsePKIXPublicKey(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("audit: trusted keys: %w", err)
			}
			pub, ok := k.(ed25519.PublicKey)
			if !ok {
				return nil, fmt.Errorf("audit: trusted keys: %T is not an Ed25519 key", k)
			}
			add(pub)
		}
	case bytes.HasPrefix(trimmed, []byte("{")):
		var doc struct {
			Keys []struct {
				PublicKey string `json:"public_key"`
				KeyID     string `json:"key_id"`
				Source    string `json:"source"`
			} `json:"keys"`
		}
		if err := json.Unmarshal(trimmed, &doc); err != nil {
			return nil, fmt.Errorf("audit: trusted keys: %w", err)
		}
		for _, k := range doc.Keys {
			pub, err := hex.DecodeString(k.PublicKey)
			if err != nil || len(pub) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("audit: trusted keys: %q is not a hex Ed25519 public key", k.PublicKey)
			}
			if k.Source == "stream" {
				return nil, fmt.Errorf("audit: trusted keys: key %s is one the stream's checkpoints carry (\"source\":\"stream\"), not one read from a node: trust the output of node audit keys --local", KeyID(pub))
			}
			if k.KeyID != "" && k.KeyID != KeyID(pub) {
				return nil, fmt.Errorf("audit: trusted keys: key_id %s is not the id of public key %s (%s)", k.KeyID, k.PublicKey, KeyID(pub))
			}
			add(pub)
		}
	default:
		for n, line := range strings.Split(string(trimmed), "\n") {
			if i := strings.IndexByte(line, '#'); i >= 0 {
				line = line[:i]
			}
			found := false
			for _, w := range strings.Fields(line) {
				if pub, err := hex.DecodeString(w); err == nil && len(pub) == ed25519.PublicKeySize {
					add(pub)
					found = true
				}
			}
			if !found && strings.TrimSpace(line) != "" {
				return nil, fmt.Errorf("audit: trusted keys: line %d holds no hex Ed25519 public key", n+1)
			}
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("audit: trusted keys: none found")
	}
	return keys, nil
}
