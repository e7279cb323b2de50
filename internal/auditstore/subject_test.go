package auditstore

import (
	"testing"

	"github.com/sharedos/sharedos/audit"
)

// No tenant's subjects alias another's or the checkpoints, whatever the
// tenants are called: a watcher of one tenant's live copies, a consumer
// of one tenant's segments, sees only that tenant's subjects. The names
// are those that would alias were a tenant ever in the position of a kind
// token (seg, checkpoint, live) beside ordinary ones.
func TestNoTenantSubjectAliasesAnother(t *testing.T) {
	const prefix = "sharedos"
	tenants := []string{"seg", "checkpoint", "live", "acme", "globex", "audit", "sharedos"}
	nodes := []string{"node-1", "seg", "checkpoint", "live"}
	// Every subject a node publishes for tenants and nodes, by owner.
	type published struct{ owner, subject string }
	var all []published
	for _, tn := range tenants {
		all = append(all, published{"tenant " + tn, audit.SegmentSubject(prefix, tn)})
		for _, ty := range []audit.Type{audit.TurnOpened, audit.ToolInvoked, audit.TurnClosed} {
			all = append(all, published{"tenant " + tn, audit.Subject(prefix, tn, ty)})
		}
	}
	for _, n := range nodes {
		all = append(all, published{"checkpoints", audit.CheckpointSubject(prefix, n)})
	}
	for _, tn := range tenants {
		for _, filter := range []string{audit.SegmentSubject(prefix, tn), audit.LiveSubjects(prefix, tn)} {
			for _, p := range all {
				if p.owner != "tenant "+tn && subjectCovers(filter, p.subject) {
					t.Errorf("tenant %s's %s matches %s of %s", tn, filter, p.subject, p.owner)
				}
			}
		}
	}
	// The stream captures segments and checkpoints, never a live copy.
	for _, p := range all {
		stored := false
		for _, s := range audit.StreamSubjects(prefix) {
			stored = stored || subjectCovers(s, p.subject)
		}
		if live := subjectCovers(audit.AllLiveSubjects(prefix), p.subject); stored == live {
			t.Errorf("%s (%s): stored %v, live %v", p.subject, p.owner, stored, live)
		}
	}
}
