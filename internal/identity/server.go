package identity

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sharedos/sharedos/audit"
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
//   - the node account (JetStream on) holds the nodes (no limits) and each
//     provider identity (may only subscribe to its own provider's
//     subjects and answer requests);
//   - each runtime identity has an account of its own, named after it,
//     whose only subjects are the turn protocol's, imported from the node
//     account — so every request it sends arrives with a
//     Nats-Request-Info header the server wrote, naming the account;
//   - each audit reader has an account of its own, named after it, whose
//     only subjects are the JetStream API subjects its role needs
//     (AuditAccess), imported from the node account as services, its
//     tenants' live copies and its own inbox, imported as streams. A
//     request crossing a service import has its reply subject replaced by
//     one the server makes up ("_R_.…") in the node account, whose
//     answers go back only to the reader's account: whatever reply a
//     reader names, JetStream's answer (a response, pulled messages) is
//     never published on a subject of the node account, where the audit
//     stream would store it.
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
	type from struct {
		Account string `json:"account"`
		Subject string `json:"subject"`
	}
	type serviceImport struct {
		Service from `json:"service"`
		Share   bool `json:"share"`
	}
	type streamImport struct {
		Stream from `json:"stream"`
	}
	type account struct {
		JetStream string `json:"jetstream,omitempty"`
		Users     []user `json:"users"`
		Exports   []any  `json:"exports,omitempty"`
		Imports   []any  `json:"imports,omitempty"`
	}
	turnSubjects := []string{bus.Prefix + ".turn.>", bus.Prefix + ".op.>"}
	node := account{JetStream: "enabled"}
	accounts := map[string]*account{bus.Account: &node}
	exports := newExportSet()
	// Every identity that may sign in to the console (all but nodes and
	// providers) imports its login subjects: the request crossing the
	// import carries the server's Nats-Request-Info naming the account.
	console := func(a *account, name string) {
		cs := ConsoleSubjects(bus.Prefix)
		p := a.Users[0].Permissions.Publish
		p.Allow = append(slices.Clip(p.Allow), cs)
		a.Imports = append(a.Imports, serviceImport{Service: from{bus.Account, cs}})
		exports.service(cs, name, false)
	}
	for _, id := range ids {
		// Every tenant rendered into a subject is one valid token.
		if err := id.Validate(); err != nil {
			return "", err
		}
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
		case Admin:
			// The policy service's subjects, imported from the node
			// account: every request arrives with the Nats-Request-Info
			// the server writes, naming this account, and no other role
			// has them (runtimes publish only turn subjects, readers only
			// their JetStream API subjects, providers nothing).
			if _, taken := accounts[id.Name]; taken {
				return "", fmt.Errorf("identity: account name %s is taken", id.Name)
			}
			ps := PolicySubjects(bus.Prefix)
			a := &account{Users: []user{{Nkey: key, Permissions: &perms{
				Publish:   &subjectPerm{Allow: []string{ps}},
				Subscribe: &subjectPerm{Allow: []string{"_INBOX.>", InboxPrefix(id.Name) + ".>"}},
			}}}}
			a.Imports = append(a.Imports, serviceImport{Service: from{bus.Account, ps}})
			exports.service(ps, id.Name, false)
			console(a, id.Name)
			accounts[id.Name] = a
		case Approver:
			// Like an admin: the approvals service's subjects, imported
			// as services (each request stamped with this account), and
			// the request announcements of its tenants, imported as
			// streams. No other role has either.
			if _, taken := accounts[id.Name]; taken {
				return "", fmt.Errorf("identity: account name %s is taken", id.Name)
			}
			svc, ann := ApproverSubjects(bus.Prefix), ApprovalAnnouncements(bus.Prefix, id)
			a := &account{Users: []user{{Nkey: key, Permissions: &perms{
				Publish:   &subjectPerm{Allow: svc},
				Subscribe: &subjectPerm{Allow: append([]string{"_INBOX.>", InboxPrefix(id.Name) + ".>"}, ann...)},
			}}}}
			for _, s := range svc {
				a.Imports = append(a.Imports, serviceImport{Service: from{bus.Account, s}})
				exports.service(s, id.Name, false)
			}
			for _, s := range ann {
				a.Imports = append(a.Imports, streamImport{Stream: from{bus.Account, s}})
				exports.stream(s, id.Name)
			}
			console(a, id.Name)
			accounts[id.Name] = a
		case Runtime, Audit:
			if _, taken := accounts[id.Name]; taken {
				return "", fmt.Errorf("identity: account name %s is taken", id.Name)
			}
			a := &account{}
			if id.Role == Runtime {
				a.Users = []user{{Nkey: key, Permissions: &perms{
					Publish:   &subjectPerm{Allow: turnSubjects},
					Subscribe: &subjectPerm{Allow: []string{"_INBOX.>", InboxPrefix(id.Name) + ".>"}},
				}}}
				for _, s := range turnSubjects {
					a.Imports = append(a.Imports, serviceImport{Service: from{bus.Account, s}})
					exports.service(s, id.Name, false)
				}
			} else {
				acc := AuditAccess(bus, id)
				a.Users = []user{{Nkey: key, Permissions: &perms{
					Publish:   &subjectPerm{Allow: acc.Services},
					Subscribe: &subjectPerm{Allow: acc.Streams},
				}}}
				// An account importing $JS.API.INFO is not given the
				// system account's JetStream API (which would answer
				// every request "not enabled for account"): the import
				// is made for every reader, published to only by those
				// whose Services list it.
				services := acc.Services
				if !slices.Contains(services, jsAccountInfo) {
					services = append(slices.Clip(services), jsAccountInfo)
				}
				for _, s := range services {
					a.Imports = append(a.Imports, serviceImport{Service: from{bus.Account, s}})
					exports.service(s, id.Name, slices.Contains(acc.StreamedResponses, s))
				}
				for _, s := range acc.Streams {
					a.Imports = append(a.Imports, streamImport{Stream: from{bus.Account, s}})
					exports.stream(s, id.Name)
				}
			}
			console(a, id.Name)
			accounts[id.Name] = a
		default:
			return "", fmt.Errorf("identity: %s: unknown role %q", id.Name, id.Role)
		}
	}
	node.Exports = exports.render()
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

// ApproverSubjects are the subjects an approver sends requests on: the
// approvals service's, "<prefix>.approvals.<op>", and contract review's,
// "<prefix>.contracts.<op>".
func ApproverSubjects(prefix string) []string {
	return []string{prefix + ".approvals.>", prefix + ".contracts.>"}
}

// ApprovalAnnouncement is the subject new approval requests of tenant
// are announced on.
func ApprovalAnnouncement(prefix, tenant string) string {
	return prefix + ".approval.requested." + tenant
}

// ApprovalAnnouncements are the announcement subjects approver id may
// subscribe to: its tenants'.
func ApprovalAnnouncements(prefix string, id Identity) []string {
	if id.AllTenantsBound() {
		return []string{prefix + ".approval.requested.*"}
	}
	out := make([]string, 0, len(id.Tenants))
	for _, t := range id.Tenants {
		out = append(out, ApprovalAnnouncement(prefix, t))
	}
	return out
}

// PolicySubjects are the policy service's subjects: "<prefix>.policy.>"
// (one subject per admin operation, "<prefix>.policy.<op>").
func PolicySubjects(prefix string) string { return prefix + ".policy.>" }

// ConsoleSubjects are the console's login subjects: "<prefix>.console.>"
// (one per node, "<prefix>.console.<node>.login").
func ConsoleSubjects(prefix string) string { return prefix + ".console.>" }

type subjectPerm struct {
	Allow []string `json:"allow"`
}

type respPerm struct {
	Max     int    `json:"max"`
	Expires string `json:"expires"`
}

// exportSet collects the node account's exports: each subject once, with
// every account that imports it, in a stable order.
type exportSet struct {
	services, streams map[string][]string
	streamed          map[string]bool
}

func newExportSet() *exportSet {
	return &exportSet{services: map[string][]string{}, streams: map[string][]string{}, streamed: map[string]bool{}}
}

func (e *exportSet) service(subject, account string, streamed bool) {
	e.services[subject] = append(e.services[subject], account)
	e.streamed[subject] = e.streamed[subject] || streamed
}

func (e *exportSet) stream(subject, account string) {
	e.streams[subject] = append(e.streams[subject], account)
}

func (e *exportSet) render() []any {
	type serviceExport struct {
		Service  string   `json:"service"`
		Accounts []string `json:"accounts"`
		// Response is "stream" for a service answering one request with
		// several messages (a pull request's batch).
		Response string `json:"response_type,omitempty"`
	}
	type streamExport struct {
		Stream   string   `json:"stream"`
		Accounts []string `json:"accounts"`
	}
	var out []any
	for _, s := range slices.Sorted(maps.Keys(e.services)) {
		x := serviceExport{Service: s, Accounts: slices.Sorted(slices.Values(e.services[s]))}
		if e.streamed[s] {
			x.Response = "stream"
		}
		out = append(out, x)
	}
	for _, s := range slices.Sorted(maps.Keys(e.streams)) {
		out = append(out, streamExport{Stream: s, Accounts: slices.Sorted(slices.Values(e.streams[s]))})
	}
	return out
}

// The JetStream API's prefix, and its account info subject.
const (
	jsAPI         = "$JS.API."
	jsAccountInfo = jsAPI + "INFO"
)

// ReaderAccess is what an audit reader's account imports from the node
// account: the subjects it may publish to (each a service import, so its
// reply subject never reaches the node account), and those it receives
// (each a stream import).
type ReaderAccess struct {
	// Services are JetStream API (and ack and flow-control) subjects; the
	// reader's publish permissions are exactly these.
	Services []string
	// StreamedResponses are the Services answered with several messages
	// per request (pulled batches).
	StreamedResponses []string
	// Streams are the reader's inbox (push deliveries) and its tenants'
	// live copies; its subscribe permissions are exactly these.
	Streams []string
}

// AuditAccess is what audit reader id may do.
//
// A reader bound to every tenant may read the whole stream (stream info,
// consumers of any kind, pulls, direct and message get, acks) but never
// write or delete. A reader bound to some tenants may only create
// consumers whose filter is one of its tenants' segment subject (the
// filter is in the API subject, and the server refuses a body whose
// filter differs), receive push deliveries on its own inbox, answer flow
// control, and watch its tenants' live copies. It has no stream info, no
// direct or message get, no pull (MSG.NEXT names a consumer, not a
// tenant), no consumer list or info, no acks: nothing that names another
// tenant's data is open to it.
//
// A consumer's deliver subject is named in the create request's body,
// which permissions do not see: a push consumer publishes in the node
// account wherever its creator said. The audit stream refuses a deliver
// subject it would capture (a cycle); the node account has no other
// stream (the operator of an external cluster must keep it so); so a
// delivery is never stored.
func AuditAccess(bus Bus, id Identity) ReaderAccess {
	s := bus.Stream
	api := jsAPI
	var r ReaderAccess
	r.Streams = []string{InboxPrefix(id.Name) + ".>"}
	if id.AllTenantsBound() {
		next := api + "CONSUMER.MSG.NEXT." + s + ".>"
		r.Services = []string{
			jsAccountInfo,
			api + "STREAM.INFO." + s,
			api + "STREAM.MSG.GET." + s,
			api + "DIRECT.GET." + s, api + "DIRECT.GET." + s + ".>",
			api + "CONSUMER.CREATE." + s + ".>",
			api + "CONSUMER.DURABLE.CREATE." + s + ".>",
			api + "CONSUMER.INFO." + s + ".>",
			api + "CONSUMER.DELETE." + s + ".>",
			next,
			"$JS.ACK." + s + ".>",
			"$JS.FC." + s + ".>",
		}
		r.StreamedResponses = []string{next}
		r.Streams = append(r.Streams, audit.AllLiveSubjects(bus.Prefix))
		return r
	}
	for _, t := range id.Tenants {
		r.Services = append(r.Services, api+"CONSUMER.CREATE."+s+".*."+audit.SegmentSubject(bus.Prefix, t))
		r.Streams = append(r.Streams, audit.LiveSubjects(bus.Prefix, t))
	}
	r.Services = append(r.Services, "$JS.FC."+s+".>")
	return r
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
