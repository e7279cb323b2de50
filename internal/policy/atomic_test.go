package policy_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/policy"
)

// An import is one atomic write: a key changed by someone else between
// the import's diff and its write refuses the whole import, naming that
// key, and none of the import's other changes is stored. With atomic
// batches off the same race leaves the import half applied.
func TestImportIsAllOrNothing(t *testing.T) {
	for _, atomic := range []bool{true, false} {
		name := map[bool]string{true: "atomic", false: "sequential"}[atomic]
		t.Run(name, func(t *testing.T) {
			base := baseConfig(t)
			_, nc := natstest.Start(t, true)
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var s *policy.Store
			interfere := false
			s, err = policy.Open(ctx, js, policy.Options{Bucket: "POLICY", Check: func(d policy.Document) error {
				if interfere {
					// Another admin changes the grants between the
					// import's diff and its write.
					interfere = false
					k := policy.Key{Kind: policy.Grants, Tenant: "acme", Name: "ada"}
					e, err := s.Get(ctx, k)
					if err != nil {
						return err
					}
					if _, err := s.Put(ctx, k, bytes.Replace(e.Value, []byte("ada-notion"), []byte("ada-notion-2"), 1), e.Revision, "other-admin"); err != nil {
						return err
					}
				}
				return d.Validate()
			}})
			if err != nil {
				t.Fatal(err)
			}
			s.SetAtomic(atomic)
			if _, err := s.Seed(ctx, policy.FromConfig(base), "seed"); err != nil {
				t.Fatal(err)
			}
			changed := policy.FromConfig(base)
			changed.Principals = append([]config.Principal(nil), changed.Principals...)
			changed.Principals[0].Grants = nil
			changed.CredentialProfiles = []config.CredentialProfile{{Tenant: "acme", Profile: "acme-shared"}}
			interfere = true
			_, err = s.Import(ctx, changed, "admin")
			var conflict *policy.ConflictError
			if !errors.As(err, &conflict) || conflict.Key.String() != "grants.acme.ada" {
				t.Fatalf("import racing a change: %v, want a conflict on grants.acme.ada", err)
			}
			_, oldErr := s.Get(ctx, policy.Key{Kind: policy.Credentials, Tenant: "acme", Name: "acme-notion-work"})
			_, newErr := s.Get(ctx, policy.Key{Kind: policy.Credentials, Tenant: "acme", Name: "acme-shared"})
			untouched := oldErr == nil && errors.Is(newErr, policy.ErrNotFound)
			if atomic != untouched {
				t.Fatalf("after the refused import: old binding %v, new binding %v (atomic=%v)", oldErr, newErr, atomic)
			}
		})
	}
}

// A key deleted earlier can be added again by an import: its write
// follows the delete marker.
func TestImportReaddsDeletedKey(t *testing.T) {
	rec := &recorder{}
	s, _ := openStore(t, baseConfig(t), rec)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	doc := policy.FromConfig(baseConfig(t))
	if _, err := s.Seed(ctx, doc, "seed"); err != nil {
		t.Fatal(err)
	}
	k := policy.Key{Kind: policy.Credentials, Tenant: "acme", Name: "acme-notion-work"}
	e, err := s.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, k, e.Revision, "admin"); err != nil {
		t.Fatal(err)
	}
	changed := policy.FromConfig(baseConfig(t))
	changed.Principals = append([]config.Principal(nil), changed.Principals...)
	changed.Principals[0].Grants = nil
	done, err := s.Import(ctx, changed, "admin")
	if err != nil || len(done) != 2 {
		t.Fatalf("import re-adding a deleted key: %d written, %v", len(done), err)
	}
	if diff, _ := s.Diff(ctx, changed); len(diff) != 0 {
		t.Fatalf("after the import the store differs: %+v", diff)
	}
	got, err := s.Get(ctx, k)
	if err != nil || got.Revision <= e.Revision {
		t.Fatalf("the re-added key: %+v %v", got, err)
	}
	last := rec.changes[len(rec.changes)-2:]
	for _, c := range last {
		if c.By != "admin" || c.Revision == 0 || c.Hash == "" && c.Op != policy.Remove {
			t.Fatalf("recorded %+v", c)
		}
	}
	if last[0].Revision+1 != last[1].Revision {
		t.Fatalf("one batch's changes are at consecutive revisions, got %d then %d", last[0].Revision, last[1].Revision)
	}
}
