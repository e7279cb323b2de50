package policy

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MaxAtomicChanges is the most changes one import writes at once:
// nats-server's limit on an atomic batch (its default). A larger import
// is refused whole.
const MaxAtomicChanges = 1000

// Batch headers of JetStream's atomic publish (nats-server 2.12 and
// later): the messages of one batch are stored together or not at all,
// each checked against the revision it expects.
const (
	batchIDHeader     = "Nats-Batch-Id"
	batchSeqHeader    = "Nats-Batch-Sequence"
	batchCommitHeader = "Nats-Batch-Commit"
)

// enableAtomic turns on atomic batch publish on the bucket's stream. A
// server that cannot (older than 2.12) leaves the store writing an
// import's keys one after another.
func (s *Store) enableAtomic(ctx context.Context) bool {
	st, err := s.js.Stream(ctx, s.Stream())
	if err != nil {
		return false
	}
	cfg := st.CachedInfo().Config
	if cfg.AllowAtomicPublish {
		return true
	}
	cfg.AllowAtomicPublish = true
	up, err := s.js.UpdateStream(ctx, cfg)
	if err != nil || !up.CachedInfo().Config.AllowAtomicPublish {
		s.opts.Logger.Warn("the policy bucket's server has no atomic batch publish: an import writes its keys one after another", "bucket", s.opts.Bucket, "err", err)
		return false
	}
	return true
}

// staged is one change of an atomic batch, with what its record needs.
type staged struct {
	c        Diff
	msg      *nats.Msg
	expect   uint64 // the subject's last sequence the write expects
	prevHash string
}

// applyAtomic writes changes as one atomic batch: every key at the
// revision the diff saw, all of them or none. Each change is recorded
// after the batch is stored, in order.
func (s *Store) applyAtomic(ctx context.Context, j Journal, changes []Diff, by string) ([]Diff, error) {
	if len(changes) > MaxAtomicChanges {
		return nil, fmt.Errorf("%w: an import of %d changes, more than the %d one atomic write holds: import it in parts", ErrInvalid, len(changes), MaxAtomicChanges)
	}
	str, err := s.js.Stream(ctx, s.Stream())
	if err != nil {
		return nil, fmt.Errorf("policy: bucket %s: %w", s.opts.Bucket, err)
	}
	at := s.opts.Clock()
	batch := make([]staged, 0, len(changes))
	for _, c := range changes {
		st, err := s.stage(ctx, str, c, by, at)
		if err != nil {
			return nil, err
		}
		batch = append(batch, st)
	}
	id := rand.Text() // a batch id: 26 characters, unguessable
	nc := s.js.Conn()
	var ack struct {
		Seq   uint64 `json:"seq"`
		Batch string `json:"batch"`
		Count int    `json:"count"`
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	for i, st := range batch {
		st.msg.Header.Set(batchIDHeader, id)
		st.msg.Header.Set(batchSeqHeader, strconv.Itoa(i+1))
		if i == len(batch)-1 {
			st.msg.Header.Set(batchCommitHeader, "1")
		}
		reply, err := nc.RequestMsgWithContext(ctx, st.msg)
		if err != nil {
			return nil, fmt.Errorf("policy: import: %w (nothing is stored unless the batch's last write was: diff again)", err)
		}
		if len(reply.Data) == 0 && i < len(batch)-1 {
			continue // staged, not yet stored
		}
		ack.Error = nil
		if err := json.Unmarshal(reply.Data, &ack); err != nil {
			return nil, fmt.Errorf("policy: import: an unreadable answer from the bucket: %w", err)
		}
		if ack.Error != nil {
			return nil, s.batchErr(ctx, batch, ack.Error.ErrCode, ack.Error.Description)
		}
	}
	if ack.Batch != id || ack.Count != len(batch) || ack.Seq < uint64(len(batch)) {
		return nil, fmt.Errorf("policy: import: the bucket acknowledged batch %q of %d at %d, not %q of %d", ack.Batch, ack.Count, ack.Seq, id, len(batch))
	}
	first := ack.Seq - uint64(len(batch)) + 1
	done := make([]Diff, 0, len(batch))
	var rerr error
	for i, st := range batch {
		rev := first + uint64(i)
		ch := Changed{Key: st.c.Key, Op: st.c.Op, PrevRevision: st.c.Revision, Revision: rev, PrevHash: st.prevHash, By: by}
		if st.c.Op != Remove {
			ch.Hash = Hash(st.c.To)
			if st.prevHash == "" {
				ch.Op = Add
			}
		}
		done = append(done, st.c)
		if err := s.record(ctx, j, ch); err != nil && rerr == nil {
			rerr = err
		}
	}
	return done, rerr
}

// stage builds c's message: a put or the bucket's own delete marker,
// expecting the subject's last sequence to be the one the diff saw.
func (s *Store) stage(ctx context.Context, str jetstream.Stream, c Diff, by string, at time.Time) (staged, error) {
	subject := "$KV." + s.opts.Bucket + "." + c.Key.String()
	st := staged{c: c, msg: nats.NewMsg(subject), expect: c.Revision}
	if c.Revision > 0 {
		prev, err := s.kv.GetRevision(ctx, c.Key.String(), c.Revision)
		if err != nil || prev.Operation() != jetstream.KeyValuePut {
			cur, _ := s.revision(ctx, c.Key)
			return staged{}, &ConflictError{Key: c.Key, Expected: c.Revision, Current: cur}
		}
		if pe, err := decodeEntry(prev); err == nil {
			st.prevHash = pe.Hash()
		} else {
			st.prevHash = Hash(prev.Value())
		}
	} else {
		// A key that held nothing may still have a subject: a delete
		// marker, which the new value follows.
		last, err := s.subjectLast(ctx, str, subject)
		if err != nil {
			return staged{}, err
		}
		st.expect = last
	}
	if c.Op == Remove {
		st.msg.Header.Set("KV-Operation", "DEL")
	} else {
		st.msg.Data = encodeEnvelope(by, at, c.To)
	}
	st.msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(st.expect, 10))
	return st, nil
}

// subjectLast is the sequence of subject's last message when that is a
// delete or purge marker, 0 when the subject has none; a key holding a
// value is a conflict (the diff saw it empty).
func (s *Store) subjectLast(ctx context.Context, str jetstream.Stream, subject string) (uint64, error) {
	m, err := str.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("policy: reading %s: %w", subject, err)
	}
	switch m.Header.Get("KV-Operation") {
	case "DEL", "PURGE":
		return m.Sequence, nil
	}
	k, _ := ParseKey(subject[len("$KV."+s.opts.Bucket+"."):])
	return 0, &ConflictError{Key: k, Expected: 0, Current: m.Sequence}
}

// batchErr names the key a refused batch conflicted on: the first whose
// subject is no longer where its write expected.
func (s *Store) batchErr(ctx context.Context, batch []staged, code int, desc string) error {
	if c := jetstream.ErrorCode(code); c == jetstream.JSErrCodeStreamWrongLastSequence || c == jetstream.JSErrCodeStreamWrongLastSequenceConstant {
		str, err := s.js.Stream(ctx, s.Stream())
		if err == nil {
			for _, st := range batch {
				var cur uint64
				m, err := str.GetLastMsgForSubject(ctx, st.msg.Subject)
				if err == nil {
					cur = m.Sequence
				} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
					continue
				}
				if cur != st.expect {
					if m != nil && m.Header.Get("KV-Operation") != "" {
						cur = 0 // the key holds nothing now
					}
					return &ConflictError{Key: st.c.Key, Expected: st.c.Revision, Current: cur}
				}
			}
		}
		return fmt.Errorf("%w: the import was refused whole: %s", ErrConflict, desc)
	}
	return fmt.Errorf("policy: import refused by the bucket (nothing was written): %s (code %d)", desc, code)
}
