package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/messages"
)

// modelListing is what `node turn list --for PROFILE` (and `node turn
// search`) print: what a runtime would send the model API (listing,
// verbatim), the names to call back with `node turn call --for`, and
// what was left out and why.
type modelListing struct {
	Turn           string            `json:"turn"`
	CatalogHash    string            `json:"catalog_hash"`
	Profile        string            `json:"profile"`
	ProjectionHash string            `json:"projection_hash"`
	Tokens         int               `json:"tokens"`
	TokenMethod    string            `json:"token_method"`
	Listing        json.RawMessage   `json:"listing"`
	Tools          []modelListedTool `json:"tools"`
	LeftOut        []modelLeftOut    `json:"left_out,omitempty"`
}

type modelListedTool struct {
	Name     string `json:"name"`
	Identity string `json:"identity"`
	Tokens   int    `json:"tokens"`
}

type modelLeftOut struct {
	Identity string                `json:"identity"`
	Why      string                `json:"why"`
	Reasons  []messages.ModelIssue `json:"reasons,omitempty"`
}

// printModelListing lists the turn for q and prints it; a tool left out
// is also said on stderr, so a listing piped on is never silently short.
func printModelListing(ctx context.Context, t *client.Turn, handle string, q client.ModelQuery) (*messages.ListReply, error) {
	rep, err := t.ListFor(ctx, q)
	if err != nil {
		return nil, err
	}
	m := rep.Model
	out := modelListing{Turn: handle, CatalogHash: rep.CatalogHash, Profile: m.Profile, ProjectionHash: m.Hash,
		Tokens: m.Tokens, TokenMethod: m.TokenMethod, Listing: json.RawMessage(m.Listing), Tools: []modelListedTool{}}
	for _, tl := range m.Tools {
		out.Tools = append(out.Tools, modelListedTool{tl.Name, tl.Provider + "/" + tl.Tool, tl.Tokens})
	}
	for _, u := range m.Unrepresentable {
		out.LeftOut = append(out.LeftOut, modelLeftOut{Identity: u.Provider + "/" + u.Tool, Why: "unrepresentable", Reasons: u.Reasons})
	}
	for _, id := range m.OverLimit {
		out.LeftOut = append(out.LeftOut, modelLeftOut{Identity: id.Provider + "/" + id.Tool, Why: "over_limit"})
	}
	for _, id := range m.OverBudget {
		out.LeftOut = append(out.LeftOut, modelLeftOut{Identity: id.Provider + "/" + id.Tool, Why: "over_budget"})
	}
	for _, l := range out.LeftOut {
		why := l.Why
		if len(l.Reasons) > 0 {
			r := l.Reasons[0]
			at := r.Path
			if at == "" {
				at = "the root" // the empty JSON pointer names the whole schema
			}
			why += fmt.Sprintf(": %s at %s %s", r.Keyword, at, r.Reason)
			if len(l.Reasons) > 1 {
				why += fmt.Sprintf(" (and %d more)", len(l.Reasons)-1)
			}
		}
		fmt.Fprintf(stderr, "left out of the %s listing: %s (%s)\n", m.Profile, l.Identity, why)
	}
	return rep, printJSON(out)
}
