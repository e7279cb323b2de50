package audit

import (
	"encoding/hex"
	"strings"
)

// This file names the audit subjects. A name is a function of the subject
// prefix (DefaultPrefix in internal/auditstore), the tenant and the type,
// so whoever grants or subscribes to audit subjects (identity, readers,
// watchers) names them without the store.

// Subject is the live subject of a record of tenant and type t:
// "<prefix>.audit.live.<tenant>.<type>". After a record's segment is
// stored, the sink publishes the record's bytes there as a core NATS
// message, for watchers; the stream does not capture these subjects.
// Types contain dots, so a tool.invoked record of tenant acme goes to
// "sharedos.audit.live.acme.tool.invoked"; watchers subscribe to
// LiveSubjects(prefix, tenant) ("<prefix>.audit.live.<tenant>.>") or
// "<prefix>.audit.live.*.tool.invoked".
//
// Every audit subject is "<prefix>.audit.<kind>.<name>…" with a fixed
// kind token — live, seg (segments) or checkpoint — before the tenant or
// node: a tenant is never in the position of a kind, so no tenant's
// subjects (whatever it is called: seg, checkpoint, live) match another
// tenant's or the checkpoints, and a permission on one tenant's subjects
// grants that tenant's and nothing else.
//
// The tenant must be one subject token: a tenant made only of
// [A-Za-z0-9_-] (and not empty) is used as it is; any other tenant is
// written as "~" followed by the lower-case hex of its bytes ("a.b" →
// "~612e62", "" → "~"). "~" never occurs in a plain tenant, so the mapping
// is one to one. (Configured tenants are plain: CheckTenant.)
func Subject(prefix, tenant string, t Type) string {
	return liveTenantPrefix(prefix, tenant) + string(t)
}

// LiveSubjects matches every live subject of tenant:
// "<prefix>.audit.live.<TenantToken(tenant)>.>".
func LiveSubjects(prefix, tenant string) string { return liveTenantPrefix(prefix, tenant) + ">" }

// AllLiveSubjects matches the live subjects of every tenant:
// "<prefix>.audit.live.>".
func AllLiveSubjects(prefix string) string { return prefix + ".audit.live.>" }

func liveTenantPrefix(prefix, tenant string) string {
	return prefix + ".audit.live." + TenantToken(tenant) + "."
}

// TenantToken is the subject token for tenant; see Subject.
func TenantToken(tenant string) string {
	if tenant != "" && PlainToken(tenant) {
		return tenant
	}
	return "~" + hex.EncodeToString([]byte(tenant))
}

// SegmentSubject is the subject the segments of tenant are stored on:
// "<prefix>.audit.seg.<TenantToken(tenant)>". A reader of one tenant
// filters its consumer on exactly this subject, so a NATS permission on
// the consumer-create API subject can pin a reader to its tenant.
func SegmentSubject(prefix, tenant string) string {
	return prefix + ".audit.seg." + TenantToken(tenant)
}

// AllSegmentsSubject matches the segments of every tenant:
// "<prefix>.audit.seg.*".
func AllSegmentsSubject(prefix string) string { return prefix + ".audit.seg.*" }

// AllCheckpointsSubject matches every node's checkpoints:
// "<prefix>.audit.checkpoint.*".
func AllCheckpointsSubject(prefix string) string { return prefix + ".audit.checkpoint.*" }

// StreamSubjects are the subjects of the audit stream for prefix: the
// segments and the checkpoints, nothing else (the live per-record
// subjects stay out of it).
func StreamSubjects(prefix string) []string {
	return []string{AllSegmentsSubject(prefix), AllCheckpointsSubject(prefix)}
}

// PlainToken reports whether s is made only of [A-Za-z0-9_-] (the empty
// string included): such a string is a subject token as it is.
func PlainToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// PlainSubject reports whether s is one or more dot-separated non-empty
// plain tokens (no wildcards, no whitespace).
func PlainSubject(s string) bool {
	if s == "" {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || !PlainToken(tok) {
			return false
		}
	}
	return true
}
