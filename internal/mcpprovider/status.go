package mcpprovider

import (
	"slices"
	"strings"
	"time"
)

// ProfileStatus is discovery as it stands for one (server, credential
// profile): for `node status`, metrics and logs. It holds no secret.
type ProfileStatus struct {
	Server   string    `json:"server"`
	Profile  string    `json:"profile"`
	State    State     `json:"state"`
	Class    Class     `json:"class,omitempty"`
	Error    string    `json:"error,omitempty"`
	Since    time.Time `json:"since"`
	Protocol string    `json:"protocol,omitempty"`
	// Tools is the size of the last snapshot; LastKnown says it is not
	// currently verified (stale, refreshing or failed): shown, never run.
	Tools     int       `json:"tools"`
	LastKnown bool      `json:"last_known,omitempty"`
	Scope     string    `json:"scope,omitempty"`
	Checked   time.Time `json:"checked,omitzero"`
	Expires   time.Time `json:"expires,omitzero"`
	Refused   []Refusal `json:"refused,omitempty"`
	// Names are the last snapshot's tool names, in its order.
	Names []string `json:"names,omitempty"`
}

// Status reports every profile this provider has been asked for, by
// profile name.
func (p *Provider) Status() []ProfileStatus {
	p.mu.Lock()
	ps := make([]*profile, 0, len(p.profiles))
	for _, pr := range p.profiles {
		ps = append(ps, pr)
	}
	p.mu.Unlock()
	now := p.opts.Now()
	out := make([]ProfileStatus, 0, len(ps))
	for _, pr := range ps {
		pr.mu.Lock()
		st := ProfileStatus{Server: p.id, Profile: pr.key, State: pr.state, Class: pr.class, Error: pr.lastErr,
			Since: pr.since, Protocol: pr.protocol, Refused: slices.Clone(pr.refused)}
		var snap *snapshot
		for _, s := range pr.snaps {
			if snap == nil || s.received.After(snap.received) {
				snap = s
			}
		}
		if snap != nil {
			st.Tools, st.Scope, st.Checked, st.Expires = len(snap.tools), snap.key.Scope, snap.received, snap.expires
			st.Names = make([]string, len(snap.tools))
			for i, t := range snap.tools {
				st.Names[i] = t.Name
			}
			st.LastKnown = snap.stale || st.State != StateReady
			if st.State == StateReady && !now.Before(snap.expires) {
				st.State, st.LastKnown = StateStale, true
			}
		}
		pr.mu.Unlock()
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ProfileStatus) int { return strings.Compare(a.Profile, b.Profile) })
	return out
}
