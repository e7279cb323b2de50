package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/internal/auditstore"
	"github.com/sharedos/sharedos/internal/console"
	"github.com/sharedos/sharedos/internal/contracts"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/mcpprovider"
)

// serveConsole mounts the operator console (internal/console) on the
// HTTP listener's mux and answers its login requests on the bus.
// The login subscription lives as long as the node's connection.
func (n *Node) serveConsole(mux *http.ServeMux, addr string) error {
	c, err := console.New(console.Options{Node: n.cfg.Node.ID, Source: consoleSource{n}, Logger: n.log})
	if err != nil {
		return fmt.Errorf("node: console: %w", err)
	}
	mux.Handle(console.Path, c.Handler())
	if _, err := console.ServeLogin(n.nc, n.cfg.NATS.Prefix, n.cfg.Node.ID, addr, c); err != nil {
		return fmt.Errorf("node: console login: %w", err)
	}
	return nil
}

// consoleSource is what the console reads of the node.
type consoleSource struct{ n *Node }

func (s consoleSource) Identities() *identity.Set { return s.n.identities() }

func (s consoleSource) Turns(ctx context.Context, tenant func(string) bool) ([]actors.TurnView, error) {
	return s.n.kernel.Turns(ctx, tenant, actors.MaxTurnViews)
}

func (s consoleSource) Turn(ctx context.Context, id string) (actors.TurnView, error) {
	return s.n.kernel.Inspect(ctx, id)
}

// Trail reads the audit stream on the node's own connection (the nodes'
// account reads all of it): tenant's segments, or everything.
func (s consoleSource) Trail(ctx context.Context, tenant string, fn func([]byte, *audit.Event) error) error {
	return auditstore.ReadAll(ctx, s.n.nc, auditstore.TailOptions{Prefix: s.n.cfg.NATS.Prefix, Stream: s.n.cfg.Audit.Stream,
		Filter: auditstore.TailFilter{Tenant: tenant}}, fn)
}

// Contracts reviews contract baselines in process, as the review service
// does for a caller on the bus.
func (s consoleSource) Contracts(ctx context.Context, caller contracts.Caller, op string, req contracts.Request) (contracts.Reply, error) {
	g := s.n.Contracts()
	if g == nil {
		return contracts.Reply{}, errors.New("node: no contract baselines on this node")
	}
	return contracts.Do(ctx, g, caller, op, req)
}

// ApprovalRequests are the node's approval requests (decided in process
// as the approvals service decides them for a caller on the bus).
func (s consoleSource) ApprovalRequests() *approval.Requests { return s.n.Approvals() }

// Providers are the providers the node runs now (the policy's, as
// rebuilt), with each MCP provider's discovery state.
func (s consoleSource) Providers() []console.Provider {
	lp := &s.n.provs
	lp.mu.Lock()
	var out []console.Provider
	for id, rp := range lp.run {
		out = append(out, console.Provider{ID: id, Kind: rp.cfg.Kind})
	}
	for _, p := range lp.extra {
		if _, ok := lp.run[p.ID()]; !ok {
			out = append(out, console.Provider{ID: p.ID(), Kind: "embedded"})
		}
	}
	lp.mu.Unlock()
	status := map[string][]mcpprovider.ProfileStatus{}
	for _, mp := range s.n.mcpProviders() {
		status[mp.ID()] = mp.Status()
	}
	for i := range out {
		out[i].Discovery = status[out[i].ID]
	}
	slices.SortFunc(out, func(a, b console.Provider) int { return strings.Compare(a.ID, b.ID) })
	return out
}
