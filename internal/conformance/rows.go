package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/turn"
)

// H is what a row runs against.
type H struct {
	F *Fixture
	D Driver
}

// Row is one promise: a probe that must pass, an attack that must be
// refused with Want, and the mechanism (Disable) without which the row
// must fail.
type Row struct {
	Name   string
	Probe  string
	Attack string
	Want   reason.Code
	// Options adjusts the kernel options for this row (e.g. a low ceiling).
	Options func(*actors.Options)
	// Disable switches off the mechanism the row protects.
	Disable func(*turn.Switches)
	Run     func(ctx context.Context, h *H) error
	// NeedsBus and NeedsRemoteProviders name what the row needs of a
	// column (Column.Bus, Column.RemoteProviders); elsewhere its cell is
	// "n/a": the promise is about something the column does not have.
	NeedsBus, NeedsRemoteProviders bool
	// NeedsFirstNeedCall: the row needs a call to be its turn's first
	// need of the catalogue, which a column with Tokens cannot give (a
	// token is minted after the catalogue is resolved).
	NeedsFirstNeedCall bool
	// NeedsModelListings: the row asks for model-facing listings, which a
	// runtime asks for over the turn protocol (Column.NoModelListings).
	NeedsModelListings bool
}

// AppliesTo reports whether the row runs in col.
func (r Row) AppliesTo(col Column) bool {
	return (!r.NeedsBus || col.Bus) && (!r.NeedsRemoteProviders || col.RemoteProviders) && (!r.NeedsFirstNeedCall || !col.Tokens) &&
		(!r.NeedsModelListings || !col.NoModelListings)
}

// Rows is the table's rows, in order.
func Rows() []Row {
	return []Row{
		catalogueMovedMidTurn, grantExpiresMidTurn, namespaceToggledMidTurn, toolAddedMidTurn,
		stepCeiling, oneOperationTurn, providerCalledOncePerTurn, catalogHashJoins, contractChangedBeforeCall,
		decidedAtTheInstant, foreignLease, crossTenantOpen, credentialProfileBound, directProviderCall,
		sameNameTwoServers, listChangedMidTurn, projectionDeterministic, aliasRoundTrip, grantRevokedMidTurn,
		approvalRequired, approvalBoundToArguments,
		staleTokenReconnect, // mcpcol.go
		contractDriftHeld,   // contractrows.go
	}
}

func open(ctx context.Context, h *H, who authority.AccessContext) (authority.AccessContext, string, error) {
	o, err := h.D.Open(ctx, who)
	if err != nil {
		return who, "", fmt.Errorf("open: %w", err)
	}
	who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
	return who, o.LeaseID, nil
}

func searchArgs(workspace string) []byte {
	return []byte(`{"workspace":"` + workspace + `","query":"roadmap"}`)
}

// probe wraps a failed probe step.
func probe(step string, err error) error {
	if err != nil {
		return fmt.Errorf("probe %s: %w", step, err)
	}
	return nil
}

// refused checks an attack was refused with want.
func refused(step string, err error, want reason.Code) error {
	switch {
	case err == nil:
		return fmt.Errorf("attack %s: allowed, want %s", step, want)
	case !errors.Is(err, &reason.Error{Code: want}):
		return fmt.Errorf("attack %s: refused %s (%v), want %s", step, reason.Of(err), err, want)
	}
	return nil
}

func aliases(l actors.ToolList) []string {
	out := make([]string, len(l.Tools))
	for i, t := range l.Tools {
		out[i] = t.Alias
	}
	return out
}

func shows(l actors.ToolList, alias string) bool {
	return slices.ContainsFunc(l.Tools, func(t actors.ListedTool) bool { return t.Alias == alias })
}

var catalogueMovedMidTurn = Row{
	Name:    "catalogue-moved-mid-turn",
	Probe:   "notion.search listed; provider moves its capability onto notion.admin.export; call inside the granted tree passes",
	Attack:  "the same tool outside the granted tree",
	Want:    reason.NoMatchingGrant,
	Disable: func(s *turn.Switches) { s.ReresolvePerOperation = true },
	Run: func(ctx context.Context, h *H) error {
		who, lease, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		first, err := h.D.ListTools(ctx, who)
		if err != nil || !shows(first, "notion_search") {
			return fmt.Errorf("probe first listing: %v (shown: %v)", err, aliases(first))
		}
		h.F.Notion.Set(providers.MemoryTool{Definition: SearchDef("notion.admin.export"), Handler: searchHandler})
		second, err := h.D.ListTools(ctx, who)
		if err != nil || second.CatalogHash != first.CatalogHash || !shows(second, "notion_search") {
			return fmt.Errorf("probe second listing answered differently: %v (hash %s vs %s)", err, second.CatalogHash, first.CatalogHash)
		}
		if _, err := h.D.Invoke(ctx, who, "notion_search", searchArgs("acme")); err != nil {
			return probe("call inside the granted tree", err)
		}
		_, err = h.D.Invoke(ctx, who, "notion_search", searchArgs("globex"))
		if e := refused("call outside the granted tree", err, reason.NoMatchingGrant); e != nil {
			return e
		}
		return probe("close", h.D.Close(ctx, who, lease))
	},
}

var grantExpiresMidTurn = Row{
	Name:    "grant-expires-mid-turn",
	Probe:   "bob's grant is valid at the first call",
	Attack:  "a call after the grant's expires_at, in the same turn",
	Want:    reason.NotDiscoverable,
	Disable: func(s *turn.Switches) { s.FreezeAuthority = true },
	Run: func(ctx context.Context, h *H) error {
		who, _, err := open(ctx, h, Bob)
		if err != nil {
			return err
		}
		h.F.Clock.Advance(30 * time.Minute)
		if _, err := h.D.Invoke(ctx, who, "notion_search", searchArgs("acme")); err != nil {
			return probe("call inside the window", err)
		}
		h.F.Clock.Advance(31 * time.Minute) // T0+61m: the grant lapsed
		l, err := h.D.ListTools(ctx, who)
		if err != nil {
			return probe("listing after expiry", err)
		}
		if shows(l, "notion_search") {
			return fmt.Errorf("attack listing after expiry: notion_search still shown")
		}
		_, err = h.D.Invoke(ctx, who, "notion_search", searchArgs("acme"))
		return refused("call after expiry", err, reason.NotDiscoverable)
	},
}

var namespaceToggledMidTurn = Row{
	Name:    "namespace-toggled-mid-turn",
	Probe:   "call with notion enabled; disable then re-enable it and call again",
	Attack:  "call while notion is disabled",
	Want:    reason.NamespaceDisabled,
	Disable: func(s *turn.Switches) { s.IgnoreNamespaces = true },
	Run: func(ctx context.Context, h *H) error {
		who, _, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		if _, err := h.D.Invoke(ctx, who, "notion_search", searchArgs("acme")); err != nil {
			return probe("call with notion enabled", err)
		}
		if err := h.D.UpdateNamespaces(ctx, who, []string{"notes"}); err != nil {
			return probe("disable notion", err)
		}
		l, err := h.D.ListTools(ctx, who)
		if err != nil {
			return probe("listing", err)
		}
		if shows(l, "notion_search") || !shows(l, "notes_put") {
			return fmt.Errorf("attack listing with notion disabled shows %v", aliases(l))
		}
		_, err = h.D.Invoke(ctx, who, "notion_search", searchArgs("acme"))
		if e := refused("call with notion disabled", err, reason.NamespaceDisabled); e != nil {
			return e
		}
		if err := h.D.UpdateNamespaces(ctx, who, []string{"notes", "notion"}); err != nil {
			return probe("re-enable notion", err)
		}
		_, err = h.D.Invoke(ctx, who, "notion_search", searchArgs("acme"))
		return probe("call after re-enabling", err)
	},
}

var toolAddedMidTurn = Row{
	Name:    "tool-added-mid-turn",
	Probe:   "the turn's listing is unchanged after the provider adds create_page",
	Attack:  "call create_page, which the turn was never shown",
	Want:    reason.UnknownTool,
	Disable: func(s *turn.Switches) { s.ReresolvePerOperation = true },
	Run: func(ctx context.Context, h *H) error {
		who, _, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		first, err := h.D.ListTools(ctx, who)
		if err != nil {
			return probe("listing", err)
		}
		h.F.Notion.Set(
			providers.MemoryTool{Definition: SearchDef("notion.search"), Handler: searchHandler},
			providers.MemoryTool{Definition: CreatePageDef(), Handler: providers.EchoHandler},
		)
		second, err := h.D.ListTools(ctx, who)
		if err != nil || shows(second, "notion_create_page") || second.CatalogHash != first.CatalogHash {
			return fmt.Errorf("probe listing after the add: %v, create_page shown=%v", err, shows(second, "notion_create_page"))
		}
		_, err = h.D.Invoke(ctx, who, "notion_create_page", []byte(`{"workspace":"acme","title":"x"}`))
		return refused("call the added tool", err, reason.UnknownTool)
	},
}

var stepCeiling = Row{
	Name:    "step-ceiling",
	Probe:   "three calls under a ceiling of three",
	Attack:  "a fourth call",
	Want:    reason.StepCeilingExceeded,
	Options: func(o *actors.Options) { o.StepCeiling = 3 },
	Disable: func(s *turn.Switches) { s.NoStepCeiling = true },
	Run: func(ctx context.Context, h *H) error {
		who, _, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		for i := range 3 {
			if _, err := h.D.Invoke(ctx, who, "notion_search", searchArgs("acme")); err != nil {
				return probe(fmt.Sprintf("call %d", i+1), err)
			}
		}
		_, err = h.D.Invoke(ctx, who, "notion_search", searchArgs("acme"))
		return refused("fourth call", err, reason.StepCeilingExceeded)
	},
}

var oneOperationTurn = Row{
	Name:    "one-operation-turn",
	Probe:   "a call naming no turn resolves its own catalogue, answers, and closes its turn",
	Attack:  "a call naming no turn, outside the granted tree",
	Want:    reason.NoMatchingGrant,
	Disable: func(s *turn.Switches) { s.NoOneOperationTurns = true },
	Run: func(ctx context.Context, h *H) error {
		before := h.F.Notion.CatalogCalls()
		if _, err := h.D.Invoke(ctx, Ada, "notion_search", searchArgs("acme")); err != nil {
			return probe("call with no turn", err)
		}
		if n := h.F.Notion.CatalogCalls() - before; n != 1 {
			return fmt.Errorf("probe: the one-operation turn asked the provider %d times, want 1", n)
		}
		_, err := h.D.Invoke(ctx, Ada, "notion_search", searchArgs("globex"))
		if e := refused("call with no turn outside the grant", err, reason.NoMatchingGrant); e != nil {
			return e
		}
		// Both one-operation turns are complete chains that closed.
		return h.F.Sink.WaitFor(ctx, func(recs []*audit.Record) bool {
			closed := 0
			for _, r := range recs {
				if r.Event.OneOperation && r.Event.Type == audit.TurnClosed && r.Event.Close.Reason == "one_operation" {
					closed++
				}
			}
			return closed == 2
		})
	},
}

var providerCalledOncePerTurn = Row{
	Name:    "provider-called-once-per-turn",
	Probe:   "200 concurrent first operations, then more calls: each provider asked once",
	Attack:  "call a tool the provider began offering after the turn resolved",
	Want:    reason.UnknownTool,
	Disable: func(s *turn.Switches) { s.ReresolvePerOperation = true },
	Run: func(ctx context.Context, h *H) error {
		who, _, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		release := h.F.Notion.Gate()
		var wg sync.WaitGroup
		errs := make(chan error, 200)
		for i := range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				if i%2 == 0 {
					_, err = h.D.ListTools(ctx, who)
				} else {
					_, err = h.D.ListNamespaces(ctx, who)
				}
				errs <- err
			}()
		}
		release()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return probe("concurrent first operation", err)
			}
		}
		for range 5 {
			if _, err := h.D.Invoke(ctx, who, "notion_search", searchArgs("acme")); err != nil {
				return probe("later call", err)
			}
		}
		if n, m := h.F.Notion.CatalogCalls(), h.F.Notes.CatalogCalls(); n != 1 || m != 1 {
			return fmt.Errorf("probe: providers asked notion=%d notes=%d times, want 1 each", n, m)
		}
		h.F.Notion.Set(
			providers.MemoryTool{Definition: SearchDef("notion.search"), Handler: searchHandler},
			providers.MemoryTool{Definition: CreatePageDef(), Handler: providers.EchoHandler},
		)
		_, err = h.D.Invoke(ctx, who, "notion_create_page", []byte(`{"workspace":"acme","title":"x"}`))
		return refused("call a tool added after resolution", err, reason.UnknownTool)
	},
}

var catalogHashJoins = Row{
	Name:    "catalog-hash-joins",
	Probe:   "every tool.invoked (allowed or denied) joins its turn's tool.catalog.listed on catalogHash; the trail verifies",
	Attack:  "a denied call is recorded and joins too",
	Want:    reason.NoMatchingGrant,
	Disable: func(s *turn.Switches) { s.OmitCatalogHash = true },
	Run: func(ctx context.Context, h *H) error {
		who, lease, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		l, err := h.D.ListTools(ctx, who)
		if err != nil {
			return probe("listing", err)
		}
		if _, err := h.D.Invoke(ctx, who, "notion_search", searchArgs("acme")); err != nil {
			return probe("call", err)
		}
		_, err = h.D.Invoke(ctx, who, "notion_search", searchArgs("globex"))
		if e := refused("call outside the grant", err, reason.NoMatchingGrant); e != nil {
			return e
		}
		if err := h.D.Close(ctx, who, lease); err != nil {
			return probe("close", err)
		}
		events := h.F.Sink.Events(who.TurnID)
		invoked := 0
		for _, ev := range events {
			if ev.Type == audit.ToolInvoked {
				invoked++
				if ev.CatalogHash != l.CatalogHash {
					return fmt.Errorf("probe: tool.invoked seq %d carries %q, the listing %q", ev.Seq, ev.CatalogHash, l.CatalogHash)
				}
			}
		}
		if invoked != 2 {
			return fmt.Errorf("probe: %d tool.invoked events, want 2", invoked)
		}
		var data [][]byte
		for _, r := range h.F.Sink.Records() {
			if r.Event.TurnID == who.TurnID {
				data = append(data, r.Data)
			}
		}
		if rep := audit.Verify(data, false); !rep.OK() {
			return fmt.Errorf("probe: trail does not verify: %v", rep.Violations)
		}
		return nil
	},
}

var contractChangedBeforeCall = Row{
	Name:    "contract-changed-before-call",
	Probe:   "after notion/search's contract changes (and the provider retires the old one), other tools still run",
	Attack:  "call notion_search, pinned to the contract the model was shown",
	Want:    reason.CapabilityChanged,
	Disable: func(s *turn.Switches) { s.ReresolvePerOperation = true },
	Run: func(ctx context.Context, h *H) error {
		who, _, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		if _, err := h.D.ListTools(ctx, who); err != nil {
			return probe("listing", err)
		}
		// Same name, same arguments, different meaning: the model was
		// shown a read-only search; the provider now deletes.
		changed := SearchDef("notion.search")
		changed.Description = "Search the pages of a Notion workspace and delete the matches."
		changed.Annotations = []byte(`{"destructiveHint":true}`)
		h.F.Notion.Set(providers.MemoryTool{Definition: changed, Handler: searchHandler})
		h.F.Notion.Retire("search")
		if _, err := h.D.Invoke(ctx, who, "notes_put", []byte(`{"space":"acme","title":"t"}`)); err != nil {
			return probe("call an unchanged tool", err)
		}
		_, err = h.D.Invoke(ctx, who, "notion_search", searchArgs("acme"))
		return refused("call the changed tool", err, reason.CapabilityChanged)
	},
}

// waitForCatalogCall waits until the notion provider was asked for its
// catalogue more than before times: the first need reached the provider.
func waitForCatalogCall(ctx context.Context, h *H, before int64) error {
	for h.F.Notion.CatalogCalls() <= before {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the first resolution never started: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// gatedInvoke starts an invoke that becomes the turn's first need, held
// behind a gated resolution; the clock is moved by during while it waits.
func gatedInvoke(ctx context.Context, h *H, who authority.AccessContext, during time.Duration) error {
	release := h.F.Notion.Gate()
	defer release()
	before := h.F.Notion.CatalogCalls()
	done := make(chan error, 1)
	go func() {
		_, err := h.D.Invoke(ctx, who, "notion_search", searchArgs("acme"))
		done <- err
	}()
	if err := waitForCatalogCall(ctx, h, before); err != nil {
		return err
	}
	h.F.Clock.Advance(during)
	release()
	return <-done
}

var decidedAtTheInstant = Row{
	Name:    "decided-at-the-instant",
	Probe:   "bob's call admitted at T0+50m waits behind the first resolution until T0+55m: allowed",
	Attack:  "a call admitted at T0+59m that waits until T0+120m, past the grant's expiry at T0+60m",
	Want:    reason.NotDiscoverable,
	Disable: func(s *turn.Switches) { s.StampAtAdmission = true },
	Run: func(ctx context.Context, h *H) error {
		first, _, err := open(ctx, h, Bob)
		if err != nil {
			return err
		}
		h.F.Clock.Advance(50 * time.Minute)
		if err := gatedInvoke(ctx, h, first, 5*time.Minute); err != nil {
			return probe("call decided inside the window", err)
		}
		second, _, err := open(ctx, h, Bob)
		if err != nil {
			return err
		}
		h.F.Clock.Advance(4 * time.Minute) // T0+59m
		err = gatedInvoke(ctx, h, second, 61*time.Minute)
		if e := refused("call decided after the lapse", err, reason.NotDiscoverable); e != nil {
			return e
		}
		// Within each turn, event times never decrease with seq.
		for _, id := range []string{first.TurnID, second.TurnID} {
			evs := h.F.Sink.Events(id)
			for i := 1; i < len(evs); i++ {
				if evs[i].Time.Before(evs[i-1].Time) {
					return fmt.Errorf("turn %s: seq %d %s @%s precedes seq %d @%s", id, evs[i].Seq, evs[i].Type, evs[i].Time, evs[i-1].Seq, evs[i-1].Time)
				}
			}
		}
		return nil
	},
	NeedsFirstNeedCall: true,
}

var foreignLease = Row{
	Name:    "foreign-lease",
	Probe:   "ada operates with her lease; a second attach gets its own lease, which works until released",
	Attack:  "the turn's id and ada's authority with a lease the turn does not hold (none, forged, released)",
	Want:    reason.TurnNotFound,
	Disable: func(s *turn.Switches) { s.NoLeaseCheck = true },
	Run: func(ctx context.Context, h *H) error {
		who, lease, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		if _, err := h.D.ListTools(ctx, who); err != nil {
			return probe("listing with the opener's lease", err)
		}
		attach := who
		attach.LeaseID = ""
		o, err := h.D.Open(ctx, attach)
		if err != nil || o.LeaseID == "" || o.LeaseID == lease {
			return fmt.Errorf("probe attach: %+v %v", o, err)
		}
		second := who
		second.LeaseID = o.LeaseID
		if _, err := h.D.Invoke(ctx, second, "notion_search", searchArgs("acme")); err != nil {
			return probe("call with the attached lease", err)
		}
		if err := h.D.Close(ctx, second, o.LeaseID); err != nil {
			return probe("release the attached lease", err)
		}
		for name, l := range map[string]string{"no lease": "", "a forged lease": "f0rgedf0rgedf0rgedf0rgedf0", "a released lease": o.LeaseID} {
			foreign := who
			foreign.LeaseID = l
			_, err := h.D.Invoke(ctx, foreign, "notion_search", searchArgs("acme"))
			if e := refused("call with "+name, err, reason.TurnNotFound); e != nil {
				return e
			}
		}
		if _, err := h.D.ListTools(ctx, who); err != nil {
			return probe("the opener's lease still works", err)
		}
		return probe("close", h.D.Close(ctx, who, lease))
	},
}

var crossTenantOpen = Row{
	Name:     "cross-tenant-open",
	Probe:    "acme's runtime opens, lists and calls for ada (tenant acme)",
	Attack:   "globex's runtime opens, lists or calls for ada: its identity is bound to globex only",
	Want:     reason.TenantForbidden,
	NeedsBus: true,
	Disable:  func(s *turn.Switches) { s.NoTenantBinding = true },
	Run: func(ctx context.Context, h *H) error {
		bus := h.D.(BusDriver)
		who, lease, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		if _, err := h.D.Invoke(ctx, who, "notion_search", searchArgs("acme")); err != nil {
			return probe("acme's runtime calls for ada", err)
		}
		globex := bus.AsRuntime(GlobexRuntime)
		_, err = globex.ListTools(ctx, Ada)
		if err := refused("globex's runtime lists for ada", err, reason.TenantForbidden); err != nil {
			return err
		}
		if err := probe("close", h.D.Close(ctx, who, lease)); err != nil {
			return err
		}
		_, err = globex.Open(ctx, Ada)
		return refused("globex's runtime opens for ada", err, reason.TenantForbidden)
	},
}

var credentialProfileBound = Row{
	Name:    "credential-profile-bound",
	Probe:   "ada opens and calls with her own credential profile, bob with acme's shared one",
	Attack:  "ada names bob's credential profile, at open and in a turn of one operation; on a bus, globex names acme's",
	Want:    reason.CredentialForbidden,
	Disable: func(s *turn.Switches) { s.NoCredentialBinding = true },
	Run: func(ctx context.Context, h *H) error {
		who, lease, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		if _, err := h.D.Invoke(ctx, who, "notion_search", searchArgs("acme")); err != nil {
			return probe("ada calls with her profile", err)
		}
		if err := probe("close", h.D.Close(ctx, who, lease)); err != nil {
			return err
		}
		bob := Bob
		bob.CredentialProfile = SharedProfile
		who, lease, err = open(ctx, h, bob)
		if err != nil {
			return fmt.Errorf("probe bob with the shared profile: %w", err)
		}
		if err := probe("close", h.D.Close(ctx, who, lease)); err != nil {
			return err
		}
		adaAsBob := Ada
		adaAsBob.CredentialProfile = Bob.CredentialProfile
		_, err = h.D.Open(ctx, adaAsBob)
		if err := refused("ada opens with bob's profile", err, reason.CredentialForbidden); err != nil {
			return err
		}
		_, err = h.D.ListTools(ctx, adaAsBob)
		if err := refused("ada lists with bob's profile (one operation)", err, reason.CredentialForbidden); err != nil {
			return err
		}
		if bus, ok := h.D.(BusDriver); ok {
			gus := authority.AccessContext{Tenant: "globex", Principal: "gus", CredentialProfile: Ada.CredentialProfile}
			_, err = bus.AsRuntime(GlobexRuntime).Open(ctx, gus)
			return refused("globex opens with acme's profile", err, reason.CredentialForbidden)
		}
		return nil
	},
}

var directProviderCall = Row{
	Name:                 "direct-provider-call",
	Probe:                "a call through the node runs at the provider; a runtime cannot even publish to the provider's subject",
	Attack:               "a request on the provider's subject that the node did not sign: unsigned, forged, for another tool, a replay of one the node sent",
	Want:                 reason.InvalidRequest,
	NeedsBus:             true,
	NeedsRemoteProviders: true,
	Disable:              func(s *turn.Switches) { s.NoGrantCheck = true },
	Run: func(ctx context.Context, h *H) error {
		bus := h.D.(BusDriver)
		who, lease, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		// Watch what the node sends the provider for one real call.
		sent, err := bus.Capture(ctx, "notion", func() error {
			_, err := h.D.Invoke(ctx, who, "notion_search", searchArgs("acme"))
			return probe("a call through the node", err)
		})
		if err != nil {
			return err
		}
		if len(sent.Grant) == 0 || len(sent.GrantSig) == 0 {
			return fmt.Errorf("probe: the node's request carries no execution grant")
		}
		if _, err := bus.ProviderRequest(ctx, AcmeRuntime, "notion", sent); !errors.Is(err, ErrBusRefused) {
			return fmt.Errorf("probe: a runtime publishing to the provider's subject: %v, want the bus to refuse it", err)
		}
		unsigned := *sent
		unsigned.CallID, unsigned.Grant, unsigned.GrantSig, unsigned.GrantKey = "direct-1", nil, nil, ""
		forged := *sent
		forged.GrantSig = append([]byte(nil), sent.GrantSig...)
		forged.GrantSig[0] ^= 0xff
		other := *sent
		other.Tool = "create_page"
		attacks := []struct {
			name string
			req  *messages.ProviderInvokeRequest
		}{{"unsigned", &unsigned}, {"with a forged signature", &forged}, {"for another tool", &other}, {"replayed", sent}}
		for _, a := range attacks {
			e, err := bus.ProviderRequest(ctx, "node", "notion", a.req)
			if err != nil {
				return fmt.Errorf("attack %s: %w", a.name, err)
			}
			if err := refused(a.name+" request on the provider's subject", e.Err(), reason.InvalidRequest); err != nil {
				return err
			}
		}
		return probe("close", h.D.Close(ctx, who, lease))
	},
}

// grantRevokedMidTurn: which grants a turn holds is resolved once, but
// whether each is still in force is judged at every decision against the
// live policy: a grant revoked while the turn is open refuses from the
// turn's next operation, and a grant added meanwhile is not the turn's.
var grantRevokedMidTurn = Row{
	Name:    "grant-revoked-mid-turn",
	Probe:   "ada's call passes; ada-notion is revoked and ada-admin added in the policy; a new turn sees ada-admin and not ada-notion",
	Attack:  "the open turn's next listing and call under the revoked grant (and under the added one)",
	Want:    reason.NotDiscoverable,
	Disable: func(s *turn.Switches) { s.NoLiveValidity = true },
	Run: func(ctx context.Context, h *H) error {
		who, _, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		if _, err := h.D.Invoke(ctx, who, "notion_search", searchArgs("acme")); err != nil {
			return probe("call under ada-notion", err)
		}
		if err := h.F.Live.SetGrants("acme", "ada", []authority.GrantSpec{
			{ID: "ada-notes", Capability: "notes.*", Resource: "notes/acme/**"},
			{ID: "ada-admin", Capability: "notion.search", Resource: "notion/workspace/**"},
		}); err != nil {
			return fmt.Errorf("revoke: %w", err)
		}
		l, err := h.D.ListTools(ctx, Ada) // a turn of one operation resolves the policy as it is now
		if err != nil || !shows(l, "notion_search") {
			return fmt.Errorf("probe a new turn under ada-admin: %v (shown: %v)", err, aliases(l))
		}
		if l, err = h.D.ListTools(ctx, who); err != nil {
			return probe("listing in the open turn", err)
		}
		if shows(l, "notion_search") {
			return fmt.Errorf("attack listing after revocation: notion_search still shown")
		}
		_, err = h.D.Invoke(ctx, who, "notion_search", searchArgs("acme"))
		return refused("call after revocation", err, reason.NotDiscoverable)
	},
}
