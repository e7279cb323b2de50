package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	mrand "math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cpTurn returns a valid chain of one turn: opened, resolved, calls
// (invoked + completed), and turn.closed when closed.
func cpTurn(t testing.TB, node, tenant, turnID string, calls int, closed bool) []*Record {
	t.Helper()
	tool := Tool{Alias: "notes_get", Provider: "notes", Name: "get", Namespace: "notes", Revision: strings.Repeat("ab", 32)}
	catHash := catalogHashOf([]leanTool{{alias: []byte(tool.Alias), revision: []byte(tool.Revision)}})
	var out []*Record
	prev := ""
	base := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	add := func(ev *Event) {
		seq := uint64(len(out))
		ev.ID, ev.Time, ev.Node, ev.Tenant, ev.Principal = turnID+"-"+strconv.FormatUint(seq, 10), base.Add(time.Duration(seq)), node, tenant, "ada"
		ev.TurnID, ev.Seq, ev.PrevHash = turnID, seq, prev
		r, err := Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		prev = r.Hash
		out = append(out, r)
	}
	add(&Event{Type: TurnOpened, Namespaces: []string{"notes"}})
	add(&Event{Type: CatalogResolved, CatalogHash: catHash, Catalog: &Catalog{Tools: []Tool{tool}, Providers: []ProviderStatus{{Provider: "notes", Status: "ok", Tools: 1}}}})
	for i := range calls {
		id := "c" + strconv.Itoa(i+1)
		add(&Event{Type: ToolInvoked, CatalogHash: catHash, Call: &Call{ID: id, Alias: tool.Alias, Provider: tool.Provider, Name: tool.Name, Revision: tool.Revision, Step: i + 1, Decision: "allow", ArgsHash: strings.Repeat("0", 64)}})
		add(&Event{Type: ToolCompleted, CatalogHash: catHash, Call: &Call{ID: id, Alias: tool.Alias, Provider: tool.Provider, Name: tool.Name, Revision: tool.Revision, Outcome: "ok", Duration: 5}})
	}
	if closed {
		add(&Event{Type: TurnClosed, CatalogHash: catHash, Close: &Close{Reason: "closed", Steps: calls, Events: uint64(len(out)) + 1}})
	}
	return out
}

func cpKey(t testing.TB) ed25519.PrivateKey {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func TestCheckpointSignAndParse(t *testing.T) {
	key := cpKey(t)
	pub := key.Public().(ed25519.PublicKey)
	cp := &Checkpoint{Node: "node-1", Seq: 7, PrevHash: strings.Repeat("1", 64), Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Events: 42,
		Turns: []TurnHead{{TurnID: "a", Tenant: "acme", Seq: 3, Hash: strings.Repeat("2", 64)}, {TurnID: "b<&>", Tenant: "ü", Seq: 9, Hash: strings.Repeat("3", 64), Closed: true}}}
	data, err := SignCheckpoint(cp, key)
	if err != nil {
		t.Fatal(err)
	}
	if !IsCheckpoint(data) {
		t.Fatalf("IsCheckpoint(%s) = false", data)
	}
	p, err := ParseCheckpoint(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.VerifySignature(pub); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Checkpoint, *cp) || p.Hash != HashData(data) || p.KeyID != KeyID(pub) {
		t.Fatalf("parsed %+v, signed %+v", p.Checkpoint, *cp)
	}
	// The unsigned form is what encoding/json writes, so any JSON reader
	// sees the same document.
	want, _ := json.Marshal(cp)
	if !bytes.Equal(p.Body, want) {
		t.Fatalf("canonical form\n%s\nencoding/json\n%s", p.Body, want)
	}

	// Any change to the signed bytes fails the signature; any change to
	// the form fails parsing.
	for i := range len(p.Body) - 1 {
		mod := bytes.Clone(data)
		mod[i] ^= 0x01
		q, err := ParseCheckpoint(mod)
		if err != nil {
			continue
		}
		if q.VerifySignature(pub) == nil {
			t.Fatalf("flipping byte %d (%q) went unnoticed", i, data[i])
		}
	}
	for name, bad := range map[string]string{
		"spaces":        strings.Replace(string(data), `"v":1,`, `"v": 1,`, 1),
		"key order":     strings.Replace(string(data), `{"type":"audit.checkpoint","v":1,`, `{"v":1,"type":"audit.checkpoint",`, 1),
		"duplicate key": strings.Replace(string(data), `"events":42,`, `"events":42,"events":42,`, 1),
		"unknown field": strings.Replace(string(data), `"events":42,`, `"events":42,"x":1,`, 1),
		"no sig":        string(p.Body),
		"short sig":     string(data[:len(data)-4]) + `"}`,
		"not hex sig":   string(data[:len(data)-3]) + `x"}`,
		"version":       strings.Replace(string(data), `"v":1,`, `"v":2,`, 1),
	} {
		if _, err := ParseCheckpoint([]byte(bad)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	other := cpKey(t).Public().(ed25519.PublicKey)
	if err := p.VerifySignature(other); err == nil {
		t.Fatal("verified under another key")
	}
	if _, err := SignCheckpoint(&Checkpoint{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, key); err == nil {
		t.Fatal("signed an unencodable time")
	}
}

func TestParsePublicKeys(t *testing.T) {
	a, b := cpKey(t).Public().(ed25519.PublicKey), cpKey(t).Public().(ed25519.PublicKey)
	der, _ := x509.MarshalPKIXPublicKey(a)
	pemA := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	der, _ = x509.MarshalPKIXPublicKey(b)
	pemB := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	js := fmt.Sprintf(`{"keys":[{"node":"node-1","public_key":%q},{"public_key":%q}]}`, hex.EncodeToString(a), hex.EncodeToString(b))
	lines := fmt.Sprintf("# trusted audit keys\nnode-1 %s\n\n%s  # node-2\n", hex.EncodeToString(a), hex.EncodeToString(b))
	for name, in := range map[string]string{"pem": string(pemA) + string(pemB), "json": js, "lines": lines, "dup": lines + hex.EncodeToString(a)} {
		keys, err := ParsePublicKeys([]byte(in))
		if err != nil || len(keys) != 2 || !keys[0].Equal(a) || !keys[1].Equal(b) {
			t.Errorf("%s: %v %v", name, keys, err)
		}
	}
	for name, in := range map[string]string{
		"empty": "", "comment only": "# none\n", "bad line": "node-1 abc\n", "bad json": `{"keys":[{"public_key":"zz"}]}`,
		"private pem": "-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n",
		// What the stream's checkpoints claim is not a trust anchor, and
		// a key_id must be its key's.
		"stream key":   fmt.Sprintf(`{"keys":[{"public_key":%q,"source":"local"},{"public_key":%q,"source":"stream"}]}`, hex.EncodeToString(a), hex.EncodeToString(b)),
		"wrong key_id": fmt.Sprintf(`{"keys":[{"public_key":%q,"key_id":%q}]}`, hex.EncodeToString(a), KeyID(b)),
	} {
		if _, err := ParsePublicKeys([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The verifier's fast decoder reads exactly what encoding/json reads
// wherever it accepts a record, and accepts everything Encode writes for
// plain strings.
func TestFastDecoderAgreesWithJSON(t *testing.T) {
	r := mrand.New(mrand.NewPCG(1, 2))
	words := []string{"", "a", "node-1", "notes_get", "x<y", "a&b", `q"uote`, "back\\slash", "ü", "tab\t", "\u2028"}
	str := func() string {
		if r.IntN(3) > 0 {
			return strings.Repeat("ab", r.IntN(4)) + strconv.Itoa(r.IntN(100))
		}
		return words[r.IntN(len(words))]
	}
	strs := func() []string {
		var s []string
		for range r.IntN(3) {
			s = append(s, str())
		}
		return s
	}
	plain := func(ev *Event) bool {
		b, _ := json.Marshal(ev)
		for _, c := range b {
			if c >= 0x7f || c == '\\' {
				return false
			}
		}
		return true
	}
	for i := range 4000 {
		ev := &Event{ID: str(), Type: Types()[r.IntN(len(Types()))], Time: time.Unix(r.Int64N(1e10), r.Int64N(1e9)).UTC(), Node: str(),
			Tenant: str(), Principal: str(), CredentialProfile: str(), TurnID: str(), OneOperation: r.IntN(2) == 0,
			Seq: r.Uint64(), PrevHash: str(), CatalogHash: str(), Namespaces: strs(), Listed: strs()}
		if r.IntN(2) == 0 {
			ev.Catalog = &Catalog{}
			for range r.IntN(3) {
				ev.Catalog.Tools = append(ev.Catalog.Tools, Tool{str(), str(), str(), str(), str()})
			}
			for range r.IntN(3) {
				ev.Catalog.Providers = append(ev.Catalog.Providers, ProviderStatus{str(), str(), str(), str(), r.IntN(9) - 2, strs(), r.Int64N(1e6), strs(), []ContractDrift{{str(), str(), str(), strs(), str()}}})
			}
		}
		if r.IntN(2) == 0 {
			ev.Call = &Call{str(), str(), str(), str(), str(), r.IntN(5), str(), str(), str(), str(), str(), str(), r.Int64N(100) - 50, r.IntN(5), str()}
		}
		if r.IntN(3) == 0 {
			ev.Close = &Close{Reason: str(), Steps: r.IntN(5), Events: r.Uint64()}
		}
		rec, err := Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		var fast leanEvent
		ok := fast.parse(rec.Data)
		if plain(ev) && !ok {
			t.Fatalf("event %d: the fast decoder refused %s", i, rec.Data)
		}
		if ok {
			cpSameLean(t, rec.Data, &fast)
		}
		// Damaged records: never a panic, never another reading.
		for range 4 {
			mod := bytes.Clone(rec.Data)
			switch r.IntN(3) {
			case 0:
				mod = mod[:r.IntN(len(mod))]
			case 1:
				mod[r.IntN(len(mod))] = "{}[]\",:0a-\\"[r.IntN(11)]
			case 2:
				j := r.IntN(len(mod))
				mod = append(mod[:j:j], append([]byte(" "), mod[j:]...)...)
			}
			var f leanEvent
			if f.parse(mod) {
				cpSameLean(t, mod, &f)
			}
		}
	}
}

func cpSameLean(t *testing.T, data []byte, fast *leanEvent) {
	t.Helper()
	var full Event
	if err := json.Unmarshal(data, &full); err != nil {
		// The fast decoder skips time values it does not judge;
		// encoding/json refuses an invalid one. Nothing else may differ.
		if !strings.Contains(err.Error(), "time") && !strings.Contains(err.Error(), "parsing") {
			t.Fatalf("fast decoder accepted what encoding/json refuses (%v): %s", err, data)
		}
		return
	}
	var slow leanEvent
	slow.fromEvent(&full)
	norm := func(e *leanEvent) string {
		var b strings.Builder
		for _, f := range [][]byte{e.typ, e.node, e.tenant, e.turn, e.prevHash, e.catalogHash, e.call.id, e.call.alias, e.call.provider, e.call.name, e.call.revision, e.call.decision} {
			fmt.Fprintf(&b, "%q,", f)
		}
		fmt.Fprintf(&b, "%d,%v,%v,%d,", e.seq, e.hasCall, e.hasClose, e.closeEvents)
		for _, tl := range e.tools {
			fmt.Fprintf(&b, "[%q %q %q %q %q]", tl.alias, tl.provider, tl.name, tl.namespace, tl.revision)
		}
		fmt.Fprintf(&b, "%q", e.listed)
		return b.String()
	}
	if a, b := norm(fast), norm(&slow); a != b {
		t.Fatalf("readings differ for %s:\nfast %s\njson %s", data, a, b)
	}
}
