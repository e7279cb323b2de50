package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/projection"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/turn"
)

// ModelDriver is a driver that can ask for model-facing listings
// (docs/model-facing.md) and call the names they show: the kernel itself,
// and the turn protocol's Go client.
type ModelDriver interface {
	ListFor(ctx context.Context, access authority.AccessContext, req turn.ProjectionRequest) (actors.ModelListing, error)
	InvokeAs(ctx context.Context, access authority.AccessContext, requestID string, profile projection.Profile, alias string, args []byte) (actors.CallResult, error)
}

// ListFor implements ModelDriver over the turn protocol.
func (d *ClientDriver) ListFor(ctx context.Context, a authority.AccessContext, req turn.ProjectionRequest) (actors.ModelListing, error) {
	q := client.ModelQuery{Profile: string(req.Profile), Budget: req.Budget, Encoding: req.Encoding, Query: req.Query, K: req.K}
	var rep *messages.ListReply
	var err error
	if a.TurnID == "" {
		rep, err = d.C.ListFor(ctx, messages.AccessOf(a), q)
	} else {
		rep, err = d.turn(a).ListFor(ctx, q)
	}
	if err != nil {
		return actors.ModelListing{}, err
	}
	m := rep.Model
	p := projection.Projection{Profile: projection.Profile(m.Profile), Listing: m.Listing, Hash: m.Hash, Tokens: m.Tokens, TokenMethod: m.TokenMethod}
	for _, t := range m.Tools {
		p.Tools = append(p.Tools, projection.Tool{Alias: t.Name, Identity: catalog.Identity{Provider: t.Provider, Name: t.Tool}, Revision: t.Revision, Tokens: t.Tokens})
	}
	return actors.ModelListing{CatalogHash: rep.CatalogHash, Projection: p}, nil
}

// InvokeAs implements ModelDriver over the turn protocol.
func (d *ClientDriver) InvokeAs(ctx context.Context, a authority.AccessContext, _ string, profile projection.Profile, alias string, args []byte) (actors.CallResult, error) {
	if a.TurnID == "" {
		return actors.CallResult{}, fmt.Errorf("conformance: InvokeAs needs a turn")
	}
	rep, err := d.turn(a).InvokeAs(ctx, string(profile), alias, args)
	if err != nil {
		return actors.CallResult{}, err
	}
	return actors.CallResult{CallID: rep.CallID, CatalogHash: rep.CatalogHash, Alias: rep.Alias,
		Identity: catalog.Identity{Provider: rep.Provider, Name: rep.Name}, Result: providers.Result{Text: rep.Text}}, nil
}

// ListFor implements ModelDriver through the node the turn is on.
func (d *clusterDriver) ListFor(ctx context.Context, a authority.AccessContext, req turn.ProjectionRequest) (actors.ModelListing, error) {
	return d.driver(a).ListFor(ctx, a, req)
}

// InvokeAs implements ModelDriver through the node the turn is on.
func (d *clusterDriver) InvokeAs(ctx context.Context, a authority.AccessContext, id string, profile projection.Profile, alias string, args []byte) (actors.CallResult, error) {
	return d.driver(a).InvokeAs(ctx, a, id, profile, alias, args)
}

// openModel opens a turn for Ada on a column whose driver lists for
// models.
func openModel(ctx context.Context, h *H) (ModelDriver, authority.AccessContext, string, error) {
	md, ok := h.D.(ModelDriver)
	if !ok {
		return nil, authority.AccessContext{}, "", fmt.Errorf("probe: the column's driver (%T) has no model listings", h.D)
	}
	who, lease, err := open(ctx, h, Ada)
	return md, who, lease, err
}

// lastProjection is the projection the turn's last tool.catalog.listed
// recorded.
func lastProjection(sink *audit.Memory, turnID string) *audit.Projection {
	var p *audit.Projection
	for _, ev := range sink.Events(turnID) {
		if ev.Type == audit.CatalogListed {
			p = ev.Projection
		}
	}
	return p
}

var projectionDeterministic = Row{
	Name:               "projection-deterministic",
	Probe:              "every profile's listing, asked twice at one instant, is the same bytes; its projection_hash is their SHA-256 and is what the trail records",
	Attack:             "an auditor checks what the model was sent against the trail: the record must carry the profile and the hash of the exact bytes",
	NeedsModelListings: true,
	Disable:            func(s *turn.Switches) { s.NoProjectionRecord = true },
	Run: func(ctx context.Context, h *H) error {
		md, who, lease, err := openModel(ctx, h)
		if err != nil {
			return err
		}
		for _, p := range projection.Profiles() {
			a, err := md.ListFor(ctx, who, turn.ProjectionRequest{Profile: p})
			if err != nil {
				return probe("list for "+string(p), err)
			}
			b, err := md.ListFor(ctx, who, turn.ProjectionRequest{Profile: p})
			if err != nil {
				return probe("list for "+string(p)+" again", err)
			}
			sum := sha256.Sum256(a.Projection.Listing)
			switch {
			case !bytes.Equal(a.Projection.Listing, b.Projection.Listing) || a.Projection.Hash != b.Projection.Hash:
				return fmt.Errorf("attack %s: two listings at one instant differ", p)
			case a.Projection.Hash != hex.EncodeToString(sum[:]):
				return fmt.Errorf("attack %s: projection_hash is not the SHA-256 of the listing", p)
			}
			rec := lastProjection(h.F.Sink, who.TurnID)
			if rec == nil || rec.Profile != string(p) || rec.Hash != a.Projection.Hash {
				return fmt.Errorf("attack %s: the trail does not record the listing sent (%+v)", p, rec)
			}
		}
		return probe("close", h.D.Close(ctx, who, lease))
	},
}

var aliasRoundTrip = Row{
	Name:               "alias-round-trip",
	Probe:              "a name a model listing showed calls the tool it was shown for, recorded under the turn's alias; it keeps naming that tool when the namespaces change",
	Attack:             "a call under a profile naming a tool the turn never showed that profile (by its turn alias, or shown only to another profile)",
	Want:               reason.UnknownTool,
	NeedsModelListings: true,
	Disable:            func(s *turn.Switches) { s.AnyModelName = true },
	Run: func(ctx context.Context, h *H) error {
		md, who, lease, err := openModel(ctx, h)
		if err != nil {
			return err
		}
		notion := who
		notion.EnabledNamespaces = []string{"notion"}
		if err := h.D.UpdateNamespaces(ctx, notion, notion.EnabledNamespaces); err != nil {
			return probe("enable notion only", err)
		}
		l, err := md.ListFor(ctx, who, turn.ProjectionRequest{Profile: projection.OpenAI})
		if err != nil {
			return probe("list for openai", err)
		}
		var name string
		for _, t := range l.Projection.Tools {
			if t.Identity == (catalog.Identity{Provider: "notion", Name: "search"}) {
				name = t.Alias
			}
		}
		if name == "" {
			return fmt.Errorf("probe: notion search not in the openai listing")
		}
		if err := h.D.UpdateNamespaces(ctx, who, Ada.EnabledNamespaces); err != nil {
			return probe("enable notion and notes", err)
		}
		if _, err := md.ListFor(ctx, who, turn.ProjectionRequest{Profile: projection.OpenAI}); err != nil {
			return probe("list for openai with notes", err)
		}
		res, err := md.InvokeAs(ctx, who, "", projection.OpenAI, name, searchArgs("acme"))
		if err != nil {
			return probe("call "+name+" as openai", err)
		}
		if res.Identity != (catalog.Identity{Provider: "notion", Name: "search"}) {
			return fmt.Errorf("probe: %q called %s", name, res.Identity)
		}
		for _, ev := range h.F.Sink.Events(who.TurnID) {
			if ev.Type == audit.ToolInvoked && ev.Call != nil && ev.Call.ID == res.CallID && ev.Call.Alias != "notion_search" {
				return fmt.Errorf("probe: the call is recorded as %q, not under the turn's alias", ev.Call.Alias)
			}
		}
		_, err = md.InvokeAs(ctx, who, "", projection.Gemini, name, searchArgs("acme"))
		if err := refused("a name shown only to openai, called as gemini", err, reason.UnknownTool); err != nil {
			return err
		}
		if err := probe("close", h.D.Close(ctx, who, lease)); err != nil {
			return err
		}
		return nil
	},
}
