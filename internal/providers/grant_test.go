package providers_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

var (
	grantKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	grantPub = grantKey.Public().(ed25519.PublicKey)
)

// The node's proxy signs what the kernel decided: the grant names the
// call, turn, node, access, tool, both revisions, catalogHash, the hash of
// the argument bytes sent and the resource, and expires at the call's
// deadline; its bytes are canonical JSON and the signature verifies
// against the node's key.
func TestRemoteSignsTheDecision(t *testing.T) {
	_, nc := natstest.Start(t, false)
	got := make(chan *messages.ProviderInvokeRequest, 1)
	sub, err := nc.Subscribe(messages.ProviderInvokeSubject("sharedos", "p"), func(m *nats.Msg) {
		var req messages.ProviderInvokeRequest
		if err := messages.Decode(m.Data, &req, messages.DefaultLimits()); err != nil {
			t.Error(err)
		}
		got <- &req
		b, _ := messages.Encode(&messages.ProviderInvokeReply{V: messages.Version, Text: "ok"})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	access := authority.AccessContext{Tenant: "acme", Principal: "ada", CredentialProfile: "work", TurnID: "n1.t", LeaseID: "secret",
		Attributes: map[string]string{"team": "a"}}
	deadline := time.Now().Add(3 * time.Second)
	c, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	r := providers.NewRemote(nc, "p", "sharedos", providers.WithSigner(grantKey))
	args := json.RawMessage(`{"b": 1, "a": 2}`)
	if _, err := r.Invoke(c, providers.Call{Access: access, CallID: "n1.t.3", Tool: catalog.Identity{Provider: "p", Name: "echo"},
		Revision: "noderev", Token: "tok", Arguments: args, Resource: "x/1", CatalogHash: "ch", Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	req := <-got
	if req.Access.Lease != "" {
		t.Fatal("the lease reached the provider")
	}
	if req.GrantKey != providers.GrantKeyID(grantPub) || !ed25519.Verify(grantPub, req.Grant, req.GrantSig) {
		t.Fatalf("grant not signed by the node key: key %q", req.GrantKey)
	}
	if !strings.HasPrefix(string(req.Grant), `{"args_sha256":"`) || strings.ContainsAny(string(req.Grant), " \n") {
		t.Fatalf("grant bytes are not canonical JSON: %s", req.Grant)
	}
	var g providers.Grant
	if err := json.Unmarshal(req.Grant, &g); err != nil {
		t.Fatal(err)
	}
	want := providers.Grant{V: 1, Call: "n1.t.3", Turn: "n1.t", Node: "n1", Tenant: "acme", Principal: "ada", Credential: "work",
		Attributes: map[string]string{"team": "a"}, Provider: "p", Tool: "echo", Revision: "noderev", Token: "tok", CatalogHash: "ch",
		ArgsSHA256: providers.ArgsHash(args), Resource: "x/1", IssuedAt: g.IssuedAt, Expires: deadline.UnixMilli()}
	if g.Attributes["team"] != "a" || g.IssuedAt > time.Now().UnixMilli() || g.IssuedAt < time.Now().Add(-time.Minute).UnixMilli() {
		t.Fatalf("grant %+v", g)
	}
	g.Attributes, want.Attributes = nil, nil
	if !reflect.DeepEqual(g, want) {
		t.Fatalf("grant\n %+v\nwant\n %+v", g, want)
	}
	v, err := providers.NewGrantVerifier("p", []ed25519.PublicKey{grantPub})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(req, time.Now()); err != nil {
		t.Fatalf("the provider refuses the node's own grant: %v", err)
	}
}

// signed is a valid request for provider p's tool echo at now.
func signed(t *testing.T, now time.Time, edit func(*providers.Grant)) *messages.ProviderInvokeRequest {
	t.Helper()
	req := &messages.ProviderInvokeRequest{V: messages.Version, Access: messages.Access{Tenant: "acme", Principal: "ada", TurnID: "n1.t"},
		CallID: "c1", Tool: "echo", Revision: "tok", Args: []byte(`{}`), Resource: "x/1"}
	g := &providers.Grant{V: 1, Call: "c1", Turn: "n1.t", Node: "n1", Tenant: "acme", Principal: "ada", Provider: "p", Tool: "echo",
		Revision: "r", Token: "tok", CatalogHash: "h", ArgsSHA256: providers.ArgsHash(req.Args), Resource: "x/1",
		IssuedAt: now.UnixMilli(), Expires: now.Add(10 * time.Second).UnixMilli()}
	if edit != nil {
		edit(g)
	}
	s, err := providers.NewGrantSigner(grantKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sign(req, g); err != nil {
		t.Fatal(err)
	}
	return req
}

// Times: the skew allowance on both ends, the lifetime bound; replay:
// a grant is refused a second time until it expires; a full replay
// memory refuses overloaded rather than forgetting.
func TestVerifierTimesAndReplay(t *testing.T) {
	now := time.Now()
	v, err := providers.NewGrantVerifier("p", []ed25519.PublicKey{grantPub})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		at   time.Time
		ok   bool
	}{
		{"issued a little ahead of the provider's clock", now.Add(-providers.GrantSkew + time.Second), true},
		{"issued beyond the skew ahead", now.Add(-providers.GrantSkew - time.Second), false},
		{"just after exp, within the skew", now.Add(10*time.Second + providers.GrantSkew - time.Second), true},
		{"after exp and the skew", now.Add(10*time.Second + providers.GrantSkew + time.Second), false},
	}
	for i, c := range cases {
		req := signed(t, now, func(g *providers.Grant) { g.Call = "c" + string(rune('a'+i)) })
		req.CallID = "c" + string(rune('a'+i))
		if _, err := v.Verify(req, c.at); (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	long := signed(t, now, func(g *providers.Grant) { g.Expires = now.Add(providers.MaxGrantLifetime + time.Second).UnixMilli() })
	if _, err := v.Verify(long, now); reason.Of(err) != reason.InvalidRequest {
		t.Errorf("a grant longer than MaxGrantLifetime: %v", err)
	}
	backwards := signed(t, now, func(g *providers.Grant) { g.Expires = now.Add(-time.Second).UnixMilli() })
	if _, err := v.Verify(backwards, now); reason.Of(err) != reason.InvalidRequest {
		t.Errorf("exp before iat: %v", err)
	}

	req := signed(t, now, nil)
	if _, err := v.Verify(req, now); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(req, now.Add(time.Second)); reason.Of(err) != reason.InvalidRequest || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("replay: %v", err)
	}

	full, _ := providers.NewGrantVerifier("p", []ed25519.PublicKey{grantPub})
	full.SetMaxSeen(1)
	if _, err := full.Verify(signed(t, now, nil), now); err != nil {
		t.Fatal(err)
	}
	second := signed(t, now, func(g *providers.Grant) { g.Call = "c2" })
	second.CallID = "c2"
	if _, err := full.Verify(second, now); reason.Of(err) != reason.Overloaded {
		t.Fatalf("replay memory full of live grants: %v, want overloaded", err)
	}
	// Once the first has expired it is forgotten, and room is made.
	if _, err := full.Verify(second, now.Add(10*time.Second+providers.GrantSkew+time.Millisecond)); reason.Of(err) != reason.InvalidRequest || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("an expired grant: %v", err)
	}
	third := signed(t, now.Add(time.Minute), func(g *providers.Grant) { g.Call = "c3" })
	third.CallID = "c3"
	if _, err := full.Verify(third, now.Add(time.Minute)); err != nil {
		t.Fatalf("after the first grant expired: %v", err)
	}
}

// A grant the verifier cannot read is refused, however well signed:
// unknown fields, another version, missing identity.
func TestVerifierIsStrict(t *testing.T) {
	now := time.Now()
	v, _ := providers.NewGrantVerifier("p", []ed25519.PublicKey{grantPub})
	for name, edit := range map[string]func(*providers.Grant){
		"version 2": func(g *providers.Grant) { g.V = 2 },
		"no turn":   func(g *providers.Grant) { g.Turn = "" },
		"no node":   func(g *providers.Grant) { g.Node = "" },
	} {
		req := signed(t, now, edit)
		if name == "no turn" {
			req.Access.TurnID = ""
		}
		if _, err := v.Verify(req, now); reason.Of(err) != reason.InvalidRequest {
			t.Errorf("%s: %v", name, err)
		}
	}
	req := signed(t, now, nil)
	extra := append(bytes.TrimSuffix(req.Grant, []byte("}")), []byte(`,"zz":1}`)...)
	req.Grant, req.GrantSig = extra, ed25519.Sign(grantKey, extra)
	if _, err := v.Verify(req, now); reason.Of(err) != reason.InvalidRequest || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("unknown field: %v", err)
	}
	if _, err := providers.NewGrantVerifier("p", nil); err == nil {
		t.Error("a verifier without keys")
	}
}

// BenchmarkSignedInvoke is the grant's cost per call: the node's signing
// (canonical JSON + Ed25519) and the provider's verification (signature,
// parse, checks, replay memory). BenchmarkUnsignedInvoke is the same
// request's encode and decode without it, the baseline.
func BenchmarkSignedInvoke(b *testing.B) {
	s, _ := providers.NewGrantSigner(grantKey)
	v, _ := providers.NewGrantVerifier("p", []ed25519.PublicKey{grantPub})
	v.SetMaxSeen(1 << 30)
	now := time.Now()
	args := []byte(`{"from":"2026-11-30","to":"2026-12-24"}`)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := &messages.ProviderInvokeRequest{V: messages.Version, Access: messages.Access{Tenant: "acme", Principal: "ada", TurnID: "n1.t"},
			CallID: "c" + itoa(i), Tool: "between", Revision: "tok", Args: args, Resource: "calendar/x"}
		g := &providers.Grant{V: 1, Call: req.CallID, Turn: "n1.t", Node: "n1", Tenant: "acme", Principal: "ada", Provider: "p", Tool: "between",
			Revision: "r", Token: "tok", CatalogHash: "h", ArgsSHA256: providers.ArgsHash(args), Resource: "calendar/x",
			IssuedAt: now.UnixMilli(), Expires: now.Add(10 * time.Second).UnixMilli()}
		if err := s.Sign(req, g); err != nil {
			b.Fatal(err)
		}
		data, err := messages.Encode(req)
		if err != nil {
			b.Fatal(err)
		}
		var got messages.ProviderInvokeRequest
		if err := messages.Decode(data, &got, messages.DefaultLimits()); err != nil {
			b.Fatal(err)
		}
		if _, err := v.Verify(&got, now); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnsignedInvoke(b *testing.B) {
	args := []byte(`{"from":"2026-11-30","to":"2026-12-24"}`)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := &messages.ProviderInvokeRequest{V: messages.Version, Access: messages.Access{Tenant: "acme", Principal: "ada", TurnID: "n1.t"},
			CallID: "c" + itoa(i), Tool: "between", Revision: "tok", Args: args, Resource: "calendar/x"}
		data, err := messages.Encode(req)
		if err != nil {
			b.Fatal(err)
		}
		var got messages.ProviderInvokeRequest
		if err := messages.Decode(data, &got, messages.DefaultLimits()); err != nil {
			b.Fatal(err)
		}
	}
}

func itoa(i int) string {
	var buf [20]byte
	n := len(buf)
	for {
		n--
		buf[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(buf[n:])
		}
	}
}

// The grant's canonical bytes are exactly RFC 8785's (jcs.Transform of
// encoding/json's output), for any strings: escapes, control characters,
// invalid UTF-8, U+2028, and attribute keys whose UTF-16 order differs
// from their byte order.
func TestGrantCanonicalIsRFC8785(t *testing.T) {
	odd := []string{"", "plain", "quote\"back\\slash", "ctl\x00\x01\x1f\x7f", "\b\t\n\f\r", "é ünïcødé", "\u2028\u2029",
		"bad\xff\xfeutf8", "\uffff", "\U00010000", "<html>&amp;", "emoji 🙂"}
	for i := range 200 {
		pick := func(k int) string { return odd[(i*7+k*13)%len(odd)] + odd[(i+k)%len(odd)] }
		g := providers.Grant{V: 1, Call: pick(1), Turn: pick(2), Node: pick(3), Tenant: pick(4), Principal: pick(5), Credential: pick(6),
			Provider: pick(7), Tool: pick(8), Revision: pick(9), Token: pick(10), CatalogHash: pick(11), ArgsSHA256: pick(12), Resource: pick(13),
			IssuedAt: int64(i) * 1_000_000_007, Expires: 1<<53 - int64(i)}
		if i%3 != 0 {
			g.Attributes = map[string]string{"\uffff": pick(14), "\U00010000": pick(15), pick(16): "x", "a": pick(17)}
		}
		raw, err := json.Marshal(&g)
		if err != nil {
			t.Fatal(err)
		}
		want, err := jcs.Transform(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Canonical(); !bytes.Equal(got, want) {
			t.Fatalf("grant %d:\n got %q\nwant %q", i, got, want)
		}
	}
}

// A lease is the turn holder's capability: it never reaches a provider,
// in a catalogue request either.
func TestCatalogueRequestCarriesNoLease(t *testing.T) {
	_, nc := natstest.Start(t, false)
	leases := make(chan string, 1)
	sub, err := nc.Subscribe(messages.ProviderCatalogSubject("sharedos", "p"), func(m *nats.Msg) {
		var req messages.ProviderCatalogRequest
		if err := messages.Decode(m.Data, &req, messages.DefaultLimits()); err != nil {
			t.Error(err)
		}
		leases <- req.Access.Lease
		b, _ := messages.Encode(&messages.ProviderCatalogReply{V: messages.Version})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	access := authority.AccessContext{Tenant: "acme", Principal: "ada", TurnID: "n1.t", LeaseID: "secret"}
	if _, err := providers.NewRemote(nc, "p", "sharedos").Catalog(testCtx(t), access); err != nil {
		t.Fatal(err)
	}
	if l := <-leases; l != "" {
		t.Fatalf("the provider was shown lease %q", l)
	}
}
