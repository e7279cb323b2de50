package identity

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sharedos/sharedos/internal/audit"
)

// Bus is what the rendered NATS configuration needs to know about the
// node's subjects.
type Bus struct {
	// Prefix of every SharedOS subject.
	Prefix string
	// Account is the nodes' account; default NodeAccount.
	Account string
	// Stream is the audit stream's name.
	Stream string
	// ResponseTTL is how long a provider may take to answer a call (the
	// longest call timeout plus slack); default 5 minutes.
	ResponseTTL time.Duration
}

// Keys maps identity names to their public nkeys.
type Keys map[string]string

// ServerConfig renders the accounts, users and permissions of ids as a
// nats-server configuration (JSON, which nats-server's parser reads), for
// the embedded server or for an operator to copy into a cluster's
// configuration. Every identity in ids must have a key in keys.
//
// The shape:
//   - the node account (JetStream on) holds the nodes (no limits), each
//     provider identity (may only subscribe to its own provider's
//     subjects and answer requests) and each audit reader (may only
//     create push consumers filtered to its tenants' segments and watch
//     its tenants' live events);
//   - each runtime identity has an account of its own, named after it,
//     whose only subjects are the turn protocol's, imported from the node
//     account — so every request it sends arrives with a
//     Nats-Request-Info header the server wrote, naming the account.
func ServerConfig(bus Bus, ids []Identity, keys Keys) (string, error) {
	if bus.Account == "" {
		bus.Account = NodeAccount
	}
	if bus.ResponseTTL <= 0 {
		bus.ResponseTTL = 5 * time.Minute
	}
	type perms struct {
		Publish        *subjectPerm `json:"publish,omitempty"`
		Subscribe      *subjectPerm `json:"subscribe,omitempty"`
		AllowResponses *respPerm    `json:"allow_responses,omitempty"`
	}
	type user struct {
		Nkey        string `json:"nkey"`
		Permissions *perms `json:"permissions,omitempty"`
	}
	type svc struct {
		Account string `json:"account,omitempty"`
		Subject string `json:"subject"`
	}
	type export struct {
		Service  string   `json:"service"`
		Accounts []string `json:"accounts,omitempty"`
	}
	type imp struct {
		Service svc  `json:"service"`
		Share   bool `json:"share"`
	}
	type account struct {
		JetStream string   `json:"jetstream,omitempty"`
		Users     []user   `json:"users"`
		Exports   []export `json:"exports,omitempty"`
		Imports   []imp    `json:"imports,omitempty"`
	}
	turnSubjects := []string{bus.Prefix + ".turn.>", bus.Prefix + ".op.>"}
	node := account{JetStream: "enabled"}
	accounts := map[string]*account{bus.Account: &node}
	var runtimes []string
	for _, id := range ids {
		key, ok := keys[id.Name]
		if !ok || key == "" {
			return "", fmt.Errorf("identity: no key for %s", id.Name)
		}
		switch id.Role {
		case Node:
			node.Users = append(node.Users, user{Nkey: key})
		case Provider:
			node.Users = append(node.Users, user{Nkey: key, Permissions: &perms{
				Publish:        &subjectPerm{Allow: []string{}},
				Subscribe:      &subjectPerm{Allow: []string{bus.Prefix + ".provider." + id.Provider + ".>"}},
				AllowResponses: &respPerm{Max: 1, Expires: bus.ResponseTTL.String()},
			}})
		case Audit:
			pub, sub := AuditPermissions(bus, id)
			node.Users = append(node.Users, user{Nkey: key, Permissions: &perms{
				Publish: &subjectPerm{Allow: pub}, Subscribe: &subjectPerm{Allow: sub},
			}})
		case Runtime:
			if _, taken := accounts[id.Name]; taken {
				return "", fmt.Errorf("identity: account name %s is taken", id.Name)
			}
			a := &account{Users: []user{{Nkey: key, Permissions: &perms{
				Publish:   &subjectPerm{Allow: turnSubjects},
				Subscribe: &subjectPerm{Allow: []string{"_INBOX.>", InboxPrefix(id.Name) + ".>"}},
			}}}}
			for _, s := range turnSubjects {
				a.Imports = append(a.Imports, imp{Service: svc{Account: bus.Account, Subject: s}, Share: false})
			}
			accounts[id.Name] = a
			runtimes = append(runtimes, id.Name)
		default:
			return "", fmt.Errorf("identity: %s: unknown role %q", id.Name, id.Role)
		}
	}
	if len(runtimes) > 0 {
		slices.Sort(runtimes)
		for _, s := range turnSubjects {
			node.Exports = append(node.Exports, export{Service: s, Accounts: runtimes})
		}
	}
	// nats-server's parser reads JSON but not its \u escapes: keep ">"
	// and friends as they are.
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{"accounts": accounts}); err != nil {
		return "", fmt.Errorf("identity: %w", err)
	}
	return b.String(), nil
}

type subjectPerm struct {
	Allow []string `json:"allow"`
}

type respPerm struct {
	Max     int    `json:"max"`
	Expires string `json:"expires"`
}

// AuditPermissions are the subjects an audit reader may publish to and
// subscribe to.
//
// A reader bound to every tenant may read the whole stream (stream info,
// consumers of any kind, direct get) but never write or delete. A reader
// bound to some tenants may only create push consumers whose filter is
// one of its tenants' segment subject (the filter is in the API subject,
// and the server refuses a body whose filter differs), receive their
// deliveries on its own inbox, answer flow control, and watch its tenants'
// live events. It has no stream info, no direct or message get, no pull
// (MSG.NEXT names a consumer, not a tenant), no consumer list or info, no
// acks: nothing that names another tenant's data is open to it.
func AuditPermissions(bus Bus, id Identity) (pub, sub []string) {
	s := bus.Stream
	api := "$JS.API."
	sub = []string{InboxPrefix(id.Name) + ".>"}
	if id.AllTenantsBound() {
		pub = []string{
			api + "INFO",
			api + "STREAM.INFO." + s,
			api + "STREAM.MSG.GET." + s,
			api + "DIRECT.GET." + s, api + "DIRECT.GET." + s + ".>",
			api + "CONSUMER.CREATE." + s + ".>",
			api + "CONSUMER.DURABLE.CREATE." + s + ".>",
			api + "CONSUMER.INFO." + s + ".>",
			api + "CONSUMER.DELETE." + s + ".>",
			api + "CONSUMER.MSG.NEXT." + s + ".>",
			"$JS.ACK." + s + ".>",
			"$JS.FC." + s + ".>",
		}
		sub = append(sub, bus.Prefix+".audit.>")
		return pub, sub
	}
	for _, t := range id.Tenants {
		tok := audit.TenantToken(t)
		pub = append(pub, api+"CONSUMER.CREATE."+s+".*."+audit.SegmentSubject(bus.Prefix, t))
		sub = append(sub, bus.Prefix+".audit."+tok+".>")
	}
	pub = append(pub, "$JS.FC."+s+".>")
	return pub, sub
}

// Provision makes sure every identity in ids has a seed file in dir
// (creating the missing ones, 0600) and renders the bus's configuration
// for them (ServerConfig).
func Provision(dir string, bus Bus, ids []Identity) (string, error) {
	keys := Keys{}
	for _, id := range ids {
		kp, err := LoadOrCreateSeed(SeedFile(dir, id.Name))
		if err != nil {
			return "", fmt.Errorf("identity: credentials of %s: %w", id.Name, err)
		}
		if keys[id.Name], err = PublicKey(kp); err != nil {
			return "", err
		}
	}
	return ServerConfig(bus, ids, keys)
}
