package audit

import (
	"encoding/json"
	"strconv"
	"time"
)

// appendEvent encodes ev exactly as encoding/json would (field order,
// omitempty, HTML-safe string escaping, RFC 3339 nano times), without
// reflection: audit encoding is on every call's path. TestEncoderMatchesJSON
// holds it to byte equality with json.Marshal.
func appendEvent(b []byte, ev *Event) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, ev.ID)
	b = append(b, `,"type":`...)
	b = appendString(b, string(ev.Type))
	b = append(b, `,"time":`...)
	b = appendTime(b, ev.Time)
	if ev.Node != "" {
		b = append(b, `,"node":`...)
		b = appendString(b, ev.Node)
	}
	b = append(b, `,"tenant":`...)
	b = appendString(b, ev.Tenant)
	b = append(b, `,"principal":`...)
	b = appendString(b, ev.Principal)
	if ev.CredentialProfile != "" {
		b = append(b, `,"credential_profile":`...)
		b = appendString(b, ev.CredentialProfile)
	}
	b = append(b, `,"turn_id":`...)
	b = appendString(b, ev.TurnID)
	if ev.OneOperation {
		b = append(b, `,"one_operation":true`...)
	}
	if ev.Transport != "" {
		b = append(b, `,"transport":`...)
		b = appendString(b, ev.Transport)
	}
	if ev.Caller != "" {
		b = append(b, `,"caller":`...)
		b = appendString(b, ev.Caller)
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, ev.Seq, 10)
	b = append(b, `,"prev_hash":`...)
	b = appendString(b, ev.PrevHash)
	if ev.CatalogHash != "" {
		b = append(b, `,"catalog_hash":`...)
		b = appendString(b, ev.CatalogHash)
	}
	if len(ev.Namespaces) > 0 {
		b = append(b, `,"namespaces":`...)
		b = appendStrings(b, ev.Namespaces)
	}
	if ev.Catalog != nil {
		b = append(b, `,"catalog":`...)
		b = appendCatalog(b, ev.Catalog)
	}
	if len(ev.Listed) > 0 {
		b = append(b, `,"listed":`...)
		b = appendStrings(b, ev.Listed)
	}
	if p := ev.Projection; p != nil {
		b = appendProjection(b, p)
	}
	if ev.Call != nil {
		b = append(b, `,"call":`...)
		b = appendCall(b, ev.Call)
	}
	if ev.Close != nil {
		c := ev.Close
		b = append(b, `,"close":{"reason":`...)
		b = appendString(b, c.Reason)
		b = append(b, `,"steps":`...)
		b = strconv.AppendInt(b, int64(c.Steps), 10)
		b = append(b, `,"events":`...)
		b = strconv.AppendUint(b, c.Events, 10)
		b = append(b, '}')
	}
	if ev.Lease != nil {
		b = append(b, `,"lease":{"id_sha256":`...)
		b = appendString(b, ev.Lease.IDHash)
		b = append(b, `,"holders":`...)
		b = strconv.AppendInt(b, int64(ev.Lease.Holders), 10)
		b = append(b, '}')
	}
	if p := ev.Policy; p != nil {
		b = append(b, `,"policy":{"key":`...)
		b = appendString(b, p.Key)
		b = append(b, `,"op":`...)
		b = appendString(b, p.Op)
		b = append(b, `,"prev_revision":`...)
		b = strconv.AppendUint(b, p.PrevRevision, 10)
		b = append(b, `,"revision":`...)
		b = strconv.AppendUint(b, p.Revision, 10)
		if p.PrevHash != "" {
			b = append(b, `,"prev_sha256":`...)
			b = appendString(b, p.PrevHash)
		}
		if p.Hash != "" {
			b = append(b, `,"sha256":`...)
			b = appendString(b, p.Hash)
		}
		b = append(b, `,"by":`...)
		b = appendString(b, p.By)
		b = append(b, '}')
	}
	if r := ev.PolicyRefusal; r != nil {
		// Rare events: the encoder's own bytes, which are json.Marshal's.
		rb, _ := json.Marshal(r)
		b = append(b, `,"policy_refusal":`...)
		b = append(b, rb...)
	}
	if c := ev.Contract; c != nil {
		b = appendContractReview(b, c)
	}
	if a := ev.Approval; a != nil {
		// Rare events: the encoder's own bytes, which are json.Marshal's.
		ab, _ := json.Marshal(a)
		b = append(b, `,"approval":`...)
		b = append(b, ab...)
	}
	return append(b, '}')
}

func appendContractReview(b []byte, c *ContractReview) []byte {
	b = append(b, `,"contract":{"tenant":`...)
	b = appendString(b, c.Tenant)
	b = append(b, `,"provider":`...)
	b = appendString(b, c.Provider)
	b = append(b, `,"tool":`...)
	b = appendString(b, c.Tool)
	b = append(b, `,"decision":`...)
	b = appendString(b, c.Decision)
	b = append(b, `,"revision":`...)
	b = appendString(b, c.Revision)
	if c.Previous != "" {
		b = append(b, `,"previous":`...)
		b = appendString(b, c.Previous)
	}
	if len(c.Classes) > 0 {
		b = append(b, `,"classes":`...)
		b = appendStrings(b, c.Classes)
	}
	b = append(b, `,"by":`...)
	b = appendString(b, c.By)
	if c.Why != "" {
		b = append(b, `,"why":`...)
		b = appendString(b, c.Why)
	}
	return append(b, '}')
}

func appendDrift(b []byte, ds []ContractDrift) []byte {
	b = append(b, `,"drift":[`...)
	for i, d := range ds {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"tool":`...)
		b = appendString(b, d.Tool)
		b = append(b, `,"revision":`...)
		b = appendString(b, d.Revision)
		b = append(b, `,"decision":`...)
		b = appendString(b, d.Decision)
		if len(d.Classes) > 0 {
			b = append(b, `,"classes":`...)
			b = appendStrings(b, d.Classes)
		}
		if d.Accepted != "" {
			b = append(b, `,"accepted":`...)
			b = appendString(b, d.Accepted)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

func appendProjection(b []byte, p *Projection) []byte {
	b = append(b, `,"projection":{"profile":`...)
	b = appendString(b, p.Profile)
	b = append(b, `,"sha256":`...)
	b = appendString(b, p.Hash)
	if len(p.Names) > 0 {
		b = append(b, `,"names":`...)
		b = appendStrings(b, p.Names)
	}
	b = append(b, `,"tokens":`...)
	b = strconv.AppendInt(b, int64(p.Tokens), 10)
	b = append(b, `,"token_method":`...)
	b = appendString(b, p.TokenMethod)
	if len(p.LeftOut) > 0 {
		b = append(b, `,"left_out":[`...)
		for i, l := range p.LeftOut {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"alias":`...)
			b = appendString(b, l.Alias)
			b = append(b, `,"why":`...)
			b = appendString(b, l.Why)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if p.QueryHash != "" {
		b = append(b, `,"query_sha256":`...)
		b = appendString(b, p.QueryHash)
	}
	if p.K != 0 {
		b = append(b, `,"k":`...)
		b = strconv.AppendInt(b, int64(p.K), 10)
	}
	return append(b, '}')
}

func appendCatalog(b []byte, c *Catalog) []byte {
	b = append(b, `{"tools":`...)
	if c.Tools == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, t := range c.Tools {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"alias":`...)
			b = appendString(b, t.Alias)
			b = append(b, `,"provider":`...)
			b = appendString(b, t.Provider)
			b = append(b, `,"name":`...)
			b = appendString(b, t.Name)
			b = append(b, `,"namespace":`...)
			b = appendString(b, t.Namespace)
			b = append(b, `,"revision":`...)
			b = appendString(b, t.Revision)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"providers":`...)
	if c.Providers == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, p := range c.Providers {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"provider":`...)
			b = appendString(b, p.Provider)
			b = append(b, `,"status":`...)
			b = appendString(b, p.Status)
			if p.Reason != "" {
				b = append(b, `,"reason":`...)
				b = appendString(b, p.Reason)
			}
			if p.Error != "" {
				b = append(b, `,"error":`...)
				b = appendString(b, p.Error)
			}
			b = append(b, `,"tools":`...)
			b = strconv.AppendInt(b, int64(p.Tools), 10)
			if len(p.Refused) > 0 {
				b = append(b, `,"refused":`...)
				b = appendStrings(b, p.Refused)
			}
			b = append(b, `,"duration_us":`...)
			b = strconv.AppendInt(b, p.DurationMicros, 10)
			if len(p.PendingReview) > 0 {
				b = append(b, `,"pending_review":`...)
				b = appendStrings(b, p.PendingReview)
			}
			if len(p.Drift) > 0 {
				b = appendDrift(b, p.Drift)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func appendCall(b []byte, c *Call) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, c.ID)
	b = append(b, `,"alias":`...)
	b = appendString(b, c.Alias)
	for _, f := range [...]struct {
		key, val string
	}{
		{`,"provider":`, c.Provider}, {`,"name":`, c.Name}, {`,"revision":`, c.Revision},
	} {
		if f.val != "" {
			b = append(b, f.key...)
			b = appendString(b, f.val)
		}
	}
	if c.Step != 0 {
		b = append(b, `,"step":`...)
		b = strconv.AppendInt(b, int64(c.Step), 10)
	}
	for _, f := range [...]struct {
		key, val string
	}{
		{`,"decision":`, c.Decision}, {`,"reason":`, c.Reason}, {`,"resource":`, c.Resource},
		{`,"grant":`, c.Grant}, {`,"args_sha256":`, c.ArgsHash}, {`,"outcome":`, c.Outcome},
	} {
		if f.val != "" {
			b = append(b, f.key...)
			b = appendString(b, f.val)
		}
	}
	if c.Duration != 0 {
		b = append(b, `,"duration_us":`...)
		b = strconv.AppendInt(b, c.Duration, 10)
	}
	if c.ResultLen != 0 {
		b = append(b, `,"result_bytes":`...)
		b = strconv.AppendInt(b, int64(c.ResultLen), 10)
	}
	if c.Approval != "" {
		b = append(b, `,"approval":`...)
		b = appendString(b, c.Approval)
	}
	return append(b, '}')
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendString writes s as encoding/json does. Plain printable ASCII (the
// overwhelming case: ids, hashes, aliases) is copied; anything else is
// left to encoding/json so escaping stays identical.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}
