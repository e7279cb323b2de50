package oauth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ResealReport is what Reseal did: the key every readable record is now
// sealed by, how many it resealed and found sealed by it already, and the
// grants it could not open (sealed by keys this node does not hold), by
// name and key id — never their content.
type ResealReport struct {
	KeyID      string       `json:"key_id"`
	Resealed   int          `json:"resealed"`
	Current    int          `json:"current"`
	Unreadable []Unreadable `json:"unreadable,omitempty"`
}

// Unreadable is a record Reseal could not open.
type Unreadable struct {
	Record string `json:"record"` // the grant's Ref, or "a pending login"
	KeyID  string `json:"key_id,omitempty"`
}

// maxResealTries bounds the compare-and-set retries of one record
// written meanwhile (a refresh, a login): such a record is sealed by the
// writer's current key, usually this one.
const maxResealTries = 3

// Reseal seals every stored grant and pending login under the sealer's
// current key: each record sealed by another key this node holds is
// opened and written back sealed by the current one, by compare-and-set
// at the revision it read, so a refresh or a login written meanwhile is
// never overwritten. Records sealed by keys it does not hold are listed
// and left as they are. Once every node seals with the same current key
// and Reseal reports no record left under a retired key, that key may be
// removed. Safe to run on several nodes at once.
func (m *Manager) Reseal(ctx context.Context) (ResealReport, error) {
	rep := ResealReport{KeyID: m.st.sealer.KeyID()}
	for _, kv := range []jetstream.KeyValue{m.st.kv, m.st.logins} {
		keys, err := kv.Keys(ctx)
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("oauth: listing %s: %w", kv.Bucket(), err)
		}
		for _, k := range keys {
			if err := m.reseal(ctx, kv, k, &rep); err != nil {
				return rep, err
			}
		}
	}
	if rep.Resealed > 0 {
		m.log.Info("oauth: records resealed", "key_id", rep.KeyID, "resealed", rep.Resealed, "unreadable", len(rep.Unreadable))
	}
	return rep, nil
}

func (m *Manager) reseal(ctx context.Context, kv jetstream.KeyValue, k string, rep *ResealReport) error {
	for range maxResealTries {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil // deleted or expired meanwhile
		}
		if err != nil {
			return fmt.Errorf("oauth: reading %s: %w", recordName(k), err)
		}
		if len(e.Value()) > maxRecord {
			return fmt.Errorf("oauth: %s: a record of %d bytes is over the %d-byte bound", recordName(k), len(e.Value()), maxRecord)
		}
		plain, current, err := m.st.sealer.open(e.Value(), []byte(k))
		var kn *KeyNotHeldError
		switch {
		case errors.As(err, &kn):
			rep.Unreadable = append(rep.Unreadable, Unreadable{Record: recordName(k), KeyID: kn.KeyID})
			return nil
		case err != nil:
			return fmt.Errorf("oauth: %s: %w", recordName(k), err)
		case current:
			rep.Current++
			return nil
		}
		_, err = kv.Update(ctx, k, m.st.sealer.Seal(plain, []byte(k)), e.Revision())
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			continue // written meanwhile: look again
		}
		if err != nil {
			return fmt.Errorf("oauth: resealing %s: %w", recordName(k), err)
		}
		rep.Resealed++
		return nil
	}
	return fmt.Errorf("oauth: %s kept changing while being resealed: run reseal again", recordName(k))
}

// recordName names a store key for a report: the grant's Ref (none of
// it secret), or "a pending login" (its state is not shown).
func recordName(k string) string {
	parts := strings.Split(k, ".")
	if len(parts) != 5 || parts[0] != "grant" {
		return "a pending login"
	}
	var f [4]string
	for i, p := range parts[1:] {
		if p == "_" {
			continue
		}
		b, err := base64.RawURLEncoding.DecodeString(p)
		if err != nil {
			return "grant " + k
		}
		f[i] = string(b)
	}
	return Ref{Server: f[0], Tenant: f[1], Profile: f[2], Principal: f[3]}.String()
}
