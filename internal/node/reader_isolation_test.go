package node_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/auditstore"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/node"
	"github.com/sharedos/sharedos/messages"
)

const isoStream = "SHAREDOS_AUDIT"

// streamState is what a write into the audit stream would change: the
// message count, the last sequence and the count on every subject.
type streamState struct {
	Msgs, LastSeq uint64
	Subjects      map[string]uint64
}

func auditState(t *testing.T, js jetstream.JetStream) streamState {
	t.Helper()
	st, err := js.Stream(ctx(t), isoStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx(t), jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	return streamState{Msgs: info.State.Msgs, LastSeq: info.State.LastSeq, Subjects: info.State.Subjects}
}

// settledTrail writes acme's and globex's records and waits until the
// node's checkpoint after them is the stream's last message: from then
// on nothing but an attack writes to the stream.
func settledTrail(t *testing.T, n *node.Node, js jetstream.JetStream) {
	t.Helper()
	tr, err := client.New(connectAs(t, n, "runtime"), nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Invoke(ctx(t), "text_stats", []byte(`{"text":"a b"}`)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.New(connectAs(t, n, "globex-rt"), nil).ListTools(ctx(t), client.Access{Tenant: "globex", Principal: "gina"}); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx(t), isoStream)
	if err != nil {
		t.Fatal(err)
	}
	wait := ctx(t)
	for {
		last, err := st.GetLastMsgForSubject(wait, ">")
		if err == nil && strings.HasPrefix(last.Subject, "sharedos.audit.checkpoint.") {
			// The checkpoint is stored after the records it attests,
			// and the last records were the globex listing's.
			s := auditState(t, js)
			if s.Subjects[audit.SegmentSubject("sharedos", "globex")] > 0 {
				return
			}
		}
		select {
		case <-wait.Done():
			t.Fatalf("no checkpoint after the trail: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// isolationNode is the sample node with a runtime of globex and
// checkpoints every 100ms, so that a settled trail ends in one.
func isolationNode(t *testing.T) *node.Node {
	n, _ := isolationNodeIn(t, t.TempDir())
	return n
}

// isolationNodeIn is isolationNode with its data directory, and the
// public key its checkpoints are signed with.
func isolationNodeIn(t *testing.T, dataDir string) (*node.Node, ed25519.PublicKey) {
	t.Helper()
	cfg := sampleConfig(t, dataDir)
	cfg.Identities = append(cfg.Identities, config.Identity{Name: "globex-rt", Role: "runtime", Tenants: []string{"globex"}})
	n, err := node.Start(context.Background(), cfg, node.Options{Logger: slog.New(slog.DiscardHandler), CheckpointInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	key, err := audit.ReadPrivateKey(auditstore.DefaultKeyFile(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	return n, key.Public().(ed25519.PublicKey)
}

// An attack: a request published by a role, with the reply subject set to
// a subject of the audit stream.
type injection struct {
	role, subject string
	body          []byte
}

// No request of any role writes into the audit stream, whatever reply
// subject it names: every JetStream API, ack and flow-control subject a
// reader may publish to, every turn subject a runtime may publish to, and
// what a provider tries, each with every stream subject (each tenant's
// segments, the node's checkpoints) as the reply; and no consumer
// delivers into the stream, whatever deliver subject its creator names.
// Each reply-subject injection is followed by the same request with a
// reply of the attacker's own, answered, so the server has answered the
// injection too before the stream is looked at. The stream's counts are
// unchanged, the consumers the injections created exist (the requests
// were served, not refused), and the trail verifies.
func TestNoRoleWritesTheAuditStreamThroughAReplySubject(t *testing.T) {
	n, key := isolationNodeIn(t, t.TempDir())
	nodeConn := connectAs(t, n, "node")
	js, err := jetstream.New(nodeConn)
	if err != nil {
		t.Fatal(err)
	}
	settledTrail(t, n, js)
	before := auditState(t, js)
	targets := []string{
		audit.SegmentSubject("sharedos", "acme"), audit.SegmentSubject("sharedos", "globex"),
		audit.SegmentSubject("sharedos", "initech"), audit.CheckpointSubject("sharedos", "node-1"),
	}
	api := "$JS.API."
	pull := func(key, name string) []byte {
		return fmt.Appendf(nil, `{"stream_name":%q,"config":{%q:%q,"ack_policy":"explicit","deliver_policy":"all"}}`, isoStream, key, name)
	}
	acmeFilter := audit.SegmentSubject("sharedos", "acme")
	var attacks []injection
	for i := range targets {
		own := fmt.Sprintf("atk-acme-%d", i)
		all := fmt.Sprintf("atk-all-%d", i)
		attacks = append(attacks,
			// acme's reader: creating a consumer of its tenant (the
			// reported attack: the answer, text the reader chose, landed
			// in the reply's tenant trail), an invalid one (an error
			// answer), and flow control.
			injection{"auditor-acme", api + "CONSUMER.CREATE." + isoStream + "." + own + "." + acmeFilter,
				fmt.Appendf(nil, `{"stream_name":%q,"config":{"name":%q,"filter_subject":%q,"ack_policy":"none","deliver_policy":"all"}}`, isoStream, own, acmeFilter)},
			injection{"auditor-acme", api + "CONSUMER.CREATE." + isoStream + ".chosen-text." + acmeFilter, []byte(`{"config":{"name":"forged record text"}}`)},
			injection{"auditor-acme", "$JS.FC." + isoStream + ".x.y", nil},
			// The reader of every tenant: everything it may publish to.
			injection{"auditor", api + "INFO", nil},
			injection{"auditor", api + "STREAM.INFO." + isoStream, nil},
			injection{"auditor", api + "STREAM.MSG.GET." + isoStream, []byte(`{"seq":1}`)},
			injection{"auditor", api + "DIRECT.GET." + isoStream, []byte(`{"seq":1}`)},
			injection{"auditor", api + "DIRECT.GET." + isoStream + "." + acmeFilter, nil},
			injection{"auditor", api + "CONSUMER.CREATE." + isoStream + "." + all, pull("name", all)},
			injection{"auditor", api + "CONSUMER.DURABLE.CREATE." + isoStream + "." + all + "d", pull("durable_name", all+"d")},
			injection{"auditor", api + "CONSUMER.INFO." + isoStream + "." + all, nil},
			// One pull re-stores the whole trail where it can.
			injection{"auditor", api + "CONSUMER.MSG.NEXT." + isoStream + "." + all, []byte(`{"batch":1000,"no_wait":true}`)},
			injection{"auditor", api + "CONSUMER.DELETE." + isoStream + ".absent", nil},
			injection{"auditor", "$JS.FC." + isoStream + ".x.y", nil},
			// A runtime: every turn subject (answered by the node, not
			// recorded: the body is no request).
			injection{"runtime", messages.OpenSubject("sharedos"), []byte("x")},
			injection{"runtime", messages.TurnSubject("sharedos", "node-1", messages.OpList), []byte("x")},
			injection{"runtime", messages.OneOpSubject("sharedos", messages.OpInvoke), []byte("x")},
			// A provider may publish nothing but answers.
			injection{"provider-calendar", api + "CONSUMER.MSG.NEXT." + isoStream + "." + all, []byte(`{"batch":1000}`)},
			injection{"provider-calendar", api + "STREAM.INFO." + isoStream, nil},
		)
	}
	conns := map[string]*nats.Conn{}
	for _, a := range attacks {
		nc := conns[a.role]
		if nc == nil {
			nc, _ = watched(t, n, a.role) // permission refusals are expected: collected, unread
			conns[a.role] = nc
		}
	}
	for i, a := range attacks {
		target := targets[i/(len(attacks)/len(targets))]
		nc := conns[a.role]
		if err := nc.PublishRequest(a.subject, target, a.body); err != nil {
			t.Fatal(err)
		}
		// The barrier: the same request, answered to the attacker. A
		// pull answers it once the injected pull is served. (A provider
		// is refused by its permissions, and flow control answers
		// nothing: a flush is their barrier.)
		if a.role == "provider-calendar" || strings.HasPrefix(a.subject, "$JS.FC.") {
			continue
		}
		body := a.body
		if strings.Contains(a.subject, "MSG.NEXT") {
			body = []byte(`{"batch":1,"no_wait":true}`)
		}
		if _, err := nc.Request(a.subject, body, 5*time.Second); err != nil && !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("%s %s: %v", a.role, a.subject, err)
		}
	}

	// The reader of every tenant acks a pulled message asking for more
	// (+NXT), the more delivered to a stream subject.
	auditor := conns["auditor"]
	for i, target := range targets {
		name := fmt.Sprintf("atk-all-%dd", i)
		m, err := auditor.Request(api+"CONSUMER.MSG.NEXT."+isoStream+"."+name, []byte(`{"batch":1}`), 5*time.Second)
		if err != nil || m.Reply == "" {
			t.Fatalf("pull from %s: %v %+v", name, err, m)
		}
		if err := auditor.PublishRequest(m.Reply, target, []byte(`+NXT {"batch":1000}`)); err != nil {
			t.Fatal(err)
		}
	}
	// Push consumers delivering into the stream, or to an API subject
	// whose answers go to the deliveries' reply subjects.
	for _, role := range []string{"auditor", "auditor-acme"} {
		rjs, err := jetstream.New(conns[role])
		if err != nil {
			t.Fatal(err)
		}
		for i, deliver := range append(targets, api+"CONSUMER.MSG.NEXT."+isoStream+".atk-all-0", api+"DIRECT.GET."+isoStream) {
			_, err := rjs.CreatePushConsumer(ctx(t), isoStream, jetstream.ConsumerConfig{
				Name: fmt.Sprintf("push-%s-%d", role, i), FilterSubject: acmeFilter, DeliverSubject: deliver,
				AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
				FlowControl: true, IdleHeartbeat: time.Second,
			})
			if i < len(targets) && err == nil {
				t.Errorf("%s: a push consumer delivering to %s was created", role, deliver)
			}
		}
	}
	for _, nc := range conns {
		if err := nc.FlushTimeout(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// The injected pulls were served: the consumers exist and delivered.
	st, err := js.Stream(ctx(t), isoStream)
	if err != nil {
		t.Fatal(err)
	}
	for i := range targets {
		for _, name := range []string{fmt.Sprintf("atk-acme-%d", i), fmt.Sprintf("atk-all-%d", i), fmt.Sprintf("atk-all-%dd", i)} {
			c, err := st.Consumer(ctx(t), name)
			if err != nil {
				t.Fatalf("consumer %s, created by an injected request: %v", name, err)
			}
			if strings.HasPrefix(name, "atk-all") && c.CachedInfo().Delivered.Consumer == 0 {
				t.Errorf("consumer %s delivered nothing: the injected pull was not served", name)
			}
		}
	}
	after := auditState(t, js)
	if after.Msgs != before.Msgs || after.LastSeq != before.LastSeq || !sameCounts(before.Subjects, after.Subjects) {
		t.Fatalf("the audit stream changed: before %+v, after %+v", before, after)
	}
	// As node audit verify --trust does: with the node's key trusted.
	data, _ := readAll(t, connectAs(t, n, "auditor"))
	v, err := audit.NewVerifierWith(audit.VerifyOptions{Trusted: []ed25519.PublicKey{key}})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range data {
		v.Add(d)
	}
	if rep := v.Finish(false); !rep.OK() || rep.Checkpoints == 0 {
		t.Fatalf("verify after the attacks: %+v", rep)
	}
}

func sameCounts(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Every reader is a NATS account of its own: the rendered configuration
// imports its JetStream subjects as services from the nodes' account and
// its inbox and tenants' live copies as streams, and the subjects the
// reader is refused stay refused.
func TestReadersAreAccountsOfTheirOwn(t *testing.T) {
	n := isolationNode(t)
	var accounts struct {
		Accounts map[string]json.RawMessage `json:"accounts"`
	}
	cfg := sampleConfig(t, t.TempDir())
	cfg.Identities = append(cfg.Identities, config.Identity{Name: "globex-rt", Role: "runtime", Tenants: []string{"globex"}})
	conf, err := identity.Provision(t.TempDir(), cfg.Bus(), cfg.EffectiveIdentities())
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(conf), &accounts); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"auditor", "auditor-acme", "runtime", "globex-rt", identity.NodeAccount} {
		if _, ok := accounts.Accounts[name]; !ok {
			t.Errorf("no account %s in %s", name, conf)
		}
	}
	// acme's reader watches acme's live copies, not globex's.
	nc, errs := watched(t, n, "auditor-acme")
	live, err := nc.SubscribeSync(audit.LiveSubjects("sharedos", "acme"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.New(connectAs(t, n, "runtime"), nil).ListTools(ctx(t), client.Access{Tenant: "acme", Principal: "ada"}); err != nil {
		t.Fatal(err)
	}
	m, err := live.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("acme's reader got no live copy of acme's: %v", err)
	}
	var ev audit.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Tenant != "acme" {
		t.Fatalf("live copy %s: %v", m.Data, err)
	}
	if _, err := nc.SubscribeSync(audit.LiveSubjects("sharedos", "globex")); err != nil {
		t.Fatal(err)
	}
	refused(t, nc, errs, audit.LiveSubjects("sharedos", "globex"))
}

// Readers of tenants named like the audit subjects' kinds — seg,
// checkpoint — read their own tenant and nothing else: the subjects that
// were every tenant's segments and every node's checkpoints under the
// live copies' old layout (<prefix>.audit.<tenant>.…) are refused to
// them, a push read of another tenant is refused, and their live copies
// are their tenant's only.
func TestTenantsNamedLikeKindsReadOnlyThemselves(t *testing.T) {
	cfg := sampleConfig(t, t.TempDir())
	cfg.Identities = append(cfg.Identities,
		config.Identity{Name: "globex-rt", Role: "runtime", Tenants: []string{"globex"}},
		config.Identity{Name: "kinds-rt", Role: "runtime", Tenants: []string{"seg", "checkpoint"}},
		config.Identity{Name: "auditor-seg", Role: "audit", Tenants: []string{"seg"}},
		config.Identity{Name: "auditor-checkpoint", Role: "audit", Tenants: []string{"checkpoint"}},
	)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("tenants seg and checkpoint: %v", err)
	}
	n, err := node.Start(context.Background(), cfg, node.Options{Logger: slog.New(slog.DiscardHandler), CheckpointInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })

	for _, c := range []struct{ reader, subject string }{
		{"auditor-seg", "sharedos.audit.seg.>"},
		{"auditor-seg", audit.SegmentSubject("sharedos", "globex")},
		{"auditor-checkpoint", "sharedos.audit.checkpoint.>"},
		{"auditor-checkpoint", audit.CheckpointSubject("sharedos", "node-1")},
	} {
		nc, errs := watched(t, n, c.reader)
		if _, err := nc.SubscribeSync(c.subject); err != nil {
			t.Fatal(err)
		}
		refused(t, nc, errs, c.subject)
	}

	kinds := client.New(connectAs(t, n, "kinds-rt"), nil)
	globex := client.New(connectAs(t, n, "globex-rt"), nil)
	for _, tenant := range []string{"seg", "checkpoint"} {
		reader := connectAs(t, n, "auditor-"+tenant)
		live, err := reader.SubscribeSync(audit.LiveSubjects("sharedos", tenant))
		if err != nil {
			t.Fatal(err)
		}
		if err := reader.FlushTimeout(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		// globex's records are written before the reader's tenant's, by
		// the same writer, so a copy of them would arrive first.
		if _, err := globex.ListTools(ctx(t), client.Access{Tenant: "globex", Principal: "gina"}); err != nil {
			t.Fatal(err)
		}
		if _, err := kinds.ListTools(ctx(t), client.Access{Tenant: tenant, Principal: "sam"}); err != nil {
			t.Fatal(err)
		}
		m, err := live.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("%s's reader: no live copy: %v", tenant, err)
		}
		var ev audit.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Tenant != tenant {
			t.Fatalf("%s's reader got %s on %s", tenant, m.Data, m.Subject)
		}
		// Its push read is its tenant's records only; globex's is refused.
		var got []string
		err = auditstore.ReadAll(ctx(t), reader, auditstore.TailOptions{Filter: auditstore.TailFilter{Tenant: tenant}, Push: true}, func(_ []byte, ev *audit.Event) error {
			if ev == nil {
				return errors.New("an undecodable record")
			}
			got = append(got, ev.Tenant)
			return nil
		})
		if err != nil || len(got) == 0 || strings.Count(strings.Join(got, ","), tenant) != len(got) {
			t.Fatalf("%s's reader read %v: %v", tenant, got, err)
		}
		short, cancel := context.WithTimeout(context.Background(), time.Second)
		err = auditstore.ReadAll(short, reader, auditstore.TailOptions{Filter: auditstore.TailFilter{Tenant: "globex"}, Push: true}, func([]byte, *audit.Event) error {
			return errors.New("a globex record")
		})
		cancel()
		if err == nil || strings.Contains(err.Error(), "a globex record") {
			t.Fatalf("%s's reader reading globex: %v", tenant, err)
		}
	}
}

// The reader of every tenant reads as before from its own account: the
// whole trail (an ordered consumer), one tenant by push, and a durable
// consumer whose acks reach the server (its ack floor is the stream's
// last message once the read is through).
func TestAllTenantReaderReadsFromItsAccount(t *testing.T) {
	n := isolationNode(t)
	js, err := jetstream.New(connectAs(t, n, "node"))
	if err != nil {
		t.Fatal(err)
	}
	settledTrail(t, n, js)
	state := auditState(t, js)
	reader := connectAs(t, n, "auditor")
	data, evs := readAll(t, reader)
	if rep := audit.Verify(data, false); !rep.OK() || rep.Checkpoints == 0 {
		t.Fatalf("verify: %+v", rep)
	}
	var acme int
	for _, ev := range evs {
		if ev != nil && ev.Tenant == "acme" {
			acme++
		}
	}
	var pushed int
	if err := auditstore.ReadAll(ctx(t), reader, auditstore.TailOptions{Filter: auditstore.TailFilter{Tenant: "acme"}, Push: true}, func(_ []byte, ev *audit.Event) error {
		pushed++
		return nil
	}); err != nil || pushed != acme || acme == 0 {
		t.Fatalf("push read of acme: %d records of %d, %v", pushed, acme, err)
	}
	read, cancel := context.WithCancel(ctx(t))
	defer cancel()
	var durable int
	err = auditstore.Tail(read, reader, auditstore.TailOptions{Durable: "ops", FromStart: true}, func([]byte, *audit.Event) error {
		if durable++; durable == len(data) {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || durable != len(data) {
		t.Fatalf("durable read: %d of %d records, %v", durable, len(data), err)
	}
	st, err := js.Stream(ctx(t), isoStream)
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.Consumer(ctx(t), "ops")
	if err != nil {
		t.Fatal(err)
	}
	if info := c.CachedInfo(); info.AckFloor.Stream != state.LastSeq || info.NumAckPending != 0 {
		t.Fatalf("durable consumer: ack floor %d, want %d; %d pending", info.AckFloor.Stream, state.LastSeq, info.NumAckPending)
	}
}
