package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultHistory is how many revisions of each key the bucket keeps.
const DefaultHistory = 16

// Errors callers branch on.
var (
	// ErrNotFound: the key holds nothing (never written, or deleted).
	ErrNotFound = errors.New("policy: no such key")
	// ErrConflict is matched by every *ConflictError.
	ErrConflict = errors.New("policy: revision conflict")
	// ErrInvalid wraps a change that would leave the policy invalid.
	ErrInvalid = errors.New("policy: invalid")
	// ErrUnrecorded wraps a change that was stored but whose
	// policy.changed event could not be recorded.
	ErrUnrecorded = errors.New("policy: change stored but not recorded")
)

// ConflictError says a write expected a revision the key is no longer at.
type ConflictError struct {
	Key Key
	// Expected is the revision the write named (0: that the key holds
	// nothing); Current is the key's revision now (0: it holds nothing).
	Expected, Current uint64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("policy: %s is at revision %d, not %d: someone else changed it; get it again and reapply", e.Key, e.Current, e.Expected)
}

// Is matches ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Entry is one key's value as stored.
type Entry struct {
	Key      Key
	Revision uint64
	// Value is the item in canonical form (compact JSON).
	Value []byte
	// By is who wrote it, At when.
	By string
	At time.Time
}

// Hash is the value's content hash.
func (e Entry) Hash() string { return Hash(e.Value) }

// Changed describes one stored change: what a policy.changed event records.
type Changed struct {
	Key Key
	Op  Op
	// PrevRevision and PrevHash are the key's before the change (0 and ""
	// when it held nothing); Revision and Hash after ("" when removed).
	PrevRevision, Revision uint64
	PrevHash, Hash         string
	By                     string
}

// Journal records the changes of one operation, in order. Record is
// called after each change is stored, End once after the last (also when
// the operation failed part way).
type Journal interface {
	Record(context.Context, Changed) error
	End(context.Context) error
}

type noJournal struct{}

func (noJournal) Record(context.Context, Changed) error { return nil }
func (noJournal) End(context.Context) error             { return nil }

// Options configure a Store.
type Options struct {
	// Bucket names the key-value bucket. Required.
	Bucket string
	// Replicas is the bucket's replica count when the store creates it;
	// an existing bucket with fewer is refused. Default 1.
	Replicas int
	// Check, when set, is asked whether the whole policy a change would
	// leave is valid; a change it refuses is not written (ErrInvalid).
	Check func(Document) error
	// Journal, when set, starts the record of one operation (a put, a
	// delete, an import, a seed): each change the operation stores is
	// recorded in it (the policy.changed audit event) and the record is
	// ended when the operation ends. A change it fails to record is
	// reported ErrUnrecorded.
	Journal func() Journal
	// Clock stamps the values' At. Default time.Now.
	Clock  func() time.Time
	Logger *slog.Logger
}

// Store is the policy on a JetStream key-value bucket. Safe for
// concurrent use; every write names the revision it expects, so two
// writers never silently overwrite each other.
type Store struct {
	js   jetstream.JetStream
	kv   jetstream.KeyValue
	opts Options
	// atomic: the bucket's stream takes atomic batches, so an operation
	// of several changes stores all of them or none.
	atomic bool
}

// Open binds the bucket, creating it when it does not exist.
func Open(ctx context.Context, js jetstream.JetStream, opts Options) (*Store, error) {
	if opts.Bucket == "" {
		return nil, errors.New("policy: Options.Bucket is required")
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	kv, err := js.KeyValue(ctx, opts.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: opts.Bucket, Description: "SharedOS policy: grants, credential bindings, providers, identities",
			History: DefaultHistory, Replicas: opts.Replicas, Storage: jetstream.FileStorage, MaxValueSize: MaxValueBytes + envelopeBytes,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, opts.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("policy: bucket %s: %w", opts.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("policy: bucket %s: %w", opts.Bucket, err)
	}
	if s, ok := st.(*jetstream.KeyValueBucketStatus); ok && s.StreamInfo().Config.Replicas < opts.Replicas {
		return nil, fmt.Errorf("policy: bucket %s has %d replicas, fewer than the %d configured (policy.replicas): raise them with `nats stream edit KV_%s --replicas %d`",
			opts.Bucket, s.StreamInfo().Config.Replicas, opts.Replicas, opts.Bucket, opts.Replicas)
	}
	st0 := &Store{js: js, kv: kv, opts: opts}
	st0.atomic = st0.enableAtomic(ctx)
	return st0, nil
}

// Stream is the bucket's stream name.
func (s *Store) Stream() string { return "KV_" + s.opts.Bucket }

// envelopeBytes bounds what the envelope adds to a value.
const envelopeBytes = 4 << 10

// envelope is a stored value: the item and who wrote it when.
type envelope struct {
	V    int             `json:"v"`
	By   string          `json:"by"`
	At   time.Time       `json:"at"`
	Spec json.RawMessage `json:"spec"`
}

// encodeEnvelope writes the spec bytes verbatim (json.Marshal would
// rewrite a raw message's HTML characters).
func encodeEnvelope(by string, at time.Time, spec []byte) []byte {
	head, _ := json.Marshal(struct {
		V  int       `json:"v"`
		By string    `json:"by"`
		At time.Time `json:"at"`
	}{1, by, at.UTC()})
	out := append(head[:len(head)-1], `,"spec":`...)
	out = append(out, spec...)
	return append(out, '}')
}

func decodeEntry(e jetstream.KeyValueEntry) (Entry, error) {
	k, err := ParseKey(e.Key())
	if err != nil {
		return Entry{}, err
	}
	if n := len(e.Value()); n > MaxValueBytes+envelopeBytes {
		return Entry{}, fmt.Errorf("%w: %s: a stored value of %d bytes", ErrTooLarge, k, n)
	}
	var env envelope
	if err := json.Unmarshal(e.Value(), &env); err != nil || env.V != 1 {
		return Entry{}, fmt.Errorf("policy: %s revision %d: not a policy value (v1 envelope): %v", k, e.Revision(), err)
	}
	value, err := DecodeItem(k, env.Spec)
	if err != nil {
		return Entry{}, fmt.Errorf("policy: %s revision %d: %w", k, e.Revision(), err)
	}
	return Entry{Key: k, Revision: e.Revision(), Value: value, By: env.By, At: env.At}, nil
}

// Get returns key's current value.
func (s *Store) Get(ctx context.Context, k Key) (Entry, error) {
	e, err := s.kv.Get(ctx, k.String())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Entry{}, fmt.Errorf("%w: %s", ErrNotFound, k)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("policy: get %s: %w", k, err)
	}
	return decodeEntry(e)
}

// revision is key's current revision, 0 when it holds nothing.
func (s *Store) revision(ctx context.Context, k Key) (uint64, error) {
	e, err := s.kv.Get(ctx, k.String())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return e.Revision(), nil
}

// List returns every key's current value, in key order. A value that does
// not decode is an error: the store must not be read as holding less
// policy than it does.
func (s *Store) List(ctx context.Context) ([]Entry, error) {
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("policy: list: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []Entry
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("policy: list: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("policy: list: the watch ended")
			}
			if e == nil {
				sortEntries(out)
				return out, nil
			}
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			en, err := decodeEntry(e)
			if err != nil {
				return nil, err
			}
			out = append(out, en)
		}
	}
}

// Export is the whole policy as a document, with its entries.
func (s *Store) Export(ctx context.Context) (Document, []Entry, error) {
	es, err := s.List(ctx)
	if err != nil {
		return Document{}, nil, err
	}
	items, _ := itemsOf(es)
	d, err := DocumentOf(items)
	return d, es, err
}

func itemsOf(es []Entry) (map[Key][]byte, map[Key]uint64) {
	items, revs := make(map[Key][]byte, len(es)), make(map[Key]uint64, len(es))
	for _, e := range es {
		items[e.Key], revs[e.Key] = e.Value, e.Revision
	}
	return items, revs
}

// Diff lists what importing d would change, each with the revision the
// import would expect.
func (s *Store) Diff(ctx context.Context, d Document) ([]Diff, error) {
	return s.DiffWithin(ctx, d, Scope{All: true})
}

// check asks Options.Check about the policy the changes would leave.
func (s *Store) check(ctx context.Context, changes []Diff) error {
	if s.opts.Check == nil {
		return nil
	}
	es, err := s.List(ctx)
	if err != nil {
		return err
	}
	items, _ := itemsOf(es)
	for _, c := range changes {
		if c.Op == Remove {
			delete(items, c.Key)
		} else {
			items[c.Key] = c.To
		}
	}
	d, err := DocumentOf(items)
	if err != nil {
		return err
	}
	if err := s.opts.Check(d); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Put writes key's value (YAML or JSON of the item, validated as
// cluster.yaml validates it) if key is still at revision expect (0: holds
// nothing), and records the change as by's.
func (s *Store) Put(ctx context.Context, k Key, value []byte, expect uint64, by string) (Entry, error) {
	canon, err := DecodeItem(k, value)
	if err != nil {
		return Entry{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := s.check(ctx, []Diff{{Key: k, Op: Change, To: canon}}); err != nil {
		return Entry{}, err
	}
	j := s.journal()
	e, err := s.write(ctx, j, k, canon, expect, by)
	return e, s.end(ctx, j, err)
}

func (s *Store) journal() Journal {
	if s.opts.Journal == nil {
		return noJournal{}
	}
	return s.opts.Journal()
}

// end ends j, reporting a failure to end it as the operation's when the
// operation itself succeeded.
func (s *Store) end(ctx context.Context, j Journal, err error) error {
	if jerr := j.End(ctx); jerr != nil && err == nil {
		return fmt.Errorf("%w: %w", ErrUnrecorded, jerr)
	}
	return err
}

func (s *Store) write(ctx context.Context, j Journal, k Key, canon []byte, expect uint64, by string) (Entry, error) {
	at := s.opts.Clock()
	env := encodeEnvelope(by, at, canon)
	var prevHash string
	if expect > 0 {
		if prev, err := s.kv.GetRevision(ctx, k.String(), expect); err == nil && prev.Operation() == jetstream.KeyValuePut {
			if pe, err := decodeEntry(prev); err == nil {
				prevHash = pe.Hash()
			}
		}
	}
	var rev uint64
	var err error
	if expect == 0 {
		rev, err = s.kv.Create(ctx, k.String(), env)
	} else {
		rev, err = s.kv.Update(ctx, k.String(), env, expect)
	}
	if err != nil {
		return Entry{}, s.writeErr(ctx, k, expect, err)
	}
	op := Change
	if expect == 0 || prevHash == "" {
		op = Add
	}
	e := Entry{Key: k, Revision: rev, Value: canon, By: by, At: at}
	return e, s.record(ctx, j, Changed{Key: k, Op: op, PrevRevision: expect, Revision: rev, PrevHash: prevHash, Hash: e.Hash(), By: by})
}

// writeErr turns a refused write into a *ConflictError with the key's
// current revision when the revision was the reason.
func (s *Store) writeErr(ctx context.Context, k Key, expect uint64, err error) error {
	var api *jetstream.APIError
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		cur, gerr := s.revision(ctx, k)
		if gerr != nil {
			return fmt.Errorf("%w: %s: revision %d is not current (reading the current one: %v)", ErrConflict, k, expect, gerr)
		}
		return &ConflictError{Key: k, Expected: expect, Current: cur}
	}
	return fmt.Errorf("policy: write %s: %w", k, err)
}

func (s *Store) record(ctx context.Context, j Journal, c Changed) error {
	if err := j.Record(ctx, c); err != nil {
		return fmt.Errorf("%w: %s revision %d: %w", ErrUnrecorded, c.Key, c.Revision, err)
	}
	return nil
}

// Delete removes key if it is still at revision expect, and records the
// change as by's. It returns the revision of the removal.
func (s *Store) Delete(ctx context.Context, k Key, expect uint64, by string) (uint64, error) {
	if expect == 0 {
		return 0, fmt.Errorf("%w: delete %s names no revision", ErrInvalid, k)
	}
	if err := s.check(ctx, []Diff{{Key: k, Op: Remove}}); err != nil {
		return 0, err
	}
	j := s.journal()
	rev, err := s.remove(ctx, j, k, expect, by)
	return rev, s.end(ctx, j, err)
}

func (s *Store) remove(ctx context.Context, j Journal, k Key, expect uint64, by string) (uint64, error) {
	var prevHash string
	prev, err := s.kv.GetRevision(ctx, k.String(), expect)
	if err == nil && prev.Operation() == jetstream.KeyValuePut {
		if pe, err := decodeEntry(prev); err == nil {
			prevHash = pe.Hash()
		} else {
			// An unreadable value can be removed; its hash is of what is stored.
			prevHash = Hash(prev.Value())
		}
	}
	if prevHash == "" {
		cur, _ := s.revision(ctx, k)
		return 0, &ConflictError{Key: k, Expected: expect, Current: cur}
	}
	// A delete marker published with the expected last sequence: the
	// bucket's own delete, with the revision it was stored at.
	msg := nats.NewMsg("$KV." + s.opts.Bucket + "." + k.String())
	msg.Header.Set("KV-Operation", "DEL")
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(expect))
	if err != nil {
		return 0, s.writeErr(ctx, k, expect, err)
	}
	return ack.Sequence, s.record(ctx, j, Changed{Key: k, Op: Remove, PrevRevision: expect, Revision: ack.Sequence, PrevHash: prevHash, By: by})
}

// Import makes the store hold d: every key d changes is written with the
// revision Diff saw, all in one atomic batch, so a key changed meanwhile
// refuses the whole import with a conflict naming it and nothing is
// written. (On a server without atomic batches, older than nats-server
// 2.12, the writes are one after another and the import stops at the
// conflict: what was written before it stays, each write recorded.) d is
// validated whole before anything is written. It returns the changes
// written.
func (s *Store) Import(ctx context.Context, d Document, by string) ([]Diff, error) {
	changes, err := s.Diff(ctx, d)
	if err != nil {
		return nil, err
	}
	if s.opts.Check != nil {
		if err := s.opts.Check(d); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return s.apply(ctx, changes, by)
}

// apply writes changes, each at the revision it names: as one atomic
// batch where the bucket takes them, else in order.
func (s *Store) apply(ctx context.Context, changes []Diff, by string) ([]Diff, error) {
	j := s.journal()
	var done []Diff
	var err error
	if s.atomic && len(changes) > 1 {
		done, err = s.applyAtomic(ctx, j, changes, by)
	} else {
		done, err = s.applyIn(ctx, j, changes, by)
	}
	return done, s.end(ctx, j, err)
}

func (s *Store) applyIn(ctx context.Context, j Journal, changes []Diff, by string) ([]Diff, error) {
	var done []Diff
	for _, c := range changes {
		var err error
		if c.Op == Remove {
			_, err = s.remove(ctx, j, c.Key, c.Revision, by)
		} else {
			_, err = s.write(ctx, j, c.Key, c.To, c.Revision, by)
		}
		if err != nil && !errors.Is(err, ErrUnrecorded) {
			return done, err
		}
		done = append(done, c)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// Seed fills an empty store with d (the node's first start from
// cluster.yaml). It reports whether it wrote: a store holding anything is
// left as it is.
func (s *Store) Seed(ctx context.Context, d Document, by string) (bool, error) {
	es, err := s.List(ctx)
	if err != nil || len(es) > 0 {
		return false, err
	}
	to, err := d.Items()
	if err != nil {
		return false, err
	}
	// A seed larger than one atomic batch is stored a batch at a time: a
	// node stopped part way leaves a store that is not empty and differs
	// from the file, which the next start refuses unless policy.source is
	// store (node.checkFileAgrees).
	changes := Compare(nil, nil, to)
	j := s.journal()
	for len(changes) > 0 && err == nil {
		n := min(len(changes), MaxAtomicChanges)
		if s.atomic && n > 1 {
			_, err = s.applyAtomic(ctx, j, changes[:n], by)
		} else {
			_, err = s.applyIn(ctx, j, changes[:n], by)
		}
		changes = changes[n:]
	}
	err = s.end(ctx, j, err)
	return err == nil, err
}

func sortEntries(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int { return strings.Compare(a.Key.String(), b.Key.String()) })
}

// lastRevision is the bucket's last revision: its stream's last sequence,
// removals included.
func (s *Store) lastRevision(ctx context.Context) (uint64, error) {
	st, err := s.js.Stream(ctx, s.Stream())
	if err != nil {
		return 0, fmt.Errorf("policy: bucket %s: %w", s.opts.Bucket, err)
	}
	return st.CachedInfo().State.LastSeq, nil
}

// diffAt is Diff, and the bucket revision read before it: an import
// naming it as its Since writes only if nothing changed after it.
func (s *Store) diffAt(ctx context.Context, d Document, sc Scope) ([]Diff, uint64, error) {
	at, err := s.lastRevision(ctx)
	if err != nil {
		return nil, 0, err
	}
	changes, err := s.DiffWithin(ctx, d, sc)
	return changes, at, err
}

// ImportSince is Import, refused with a conflict when the bucket changed
// after revision since (0: no such condition) — so an import reviewed
// with a diff is exactly the change that was reviewed.
func (s *Store) ImportSince(ctx context.Context, d Document, since uint64, by string) ([]Diff, error) {
	if err := s.unchangedSince(ctx, since); err != nil {
		return nil, err
	}
	return s.Import(ctx, d, by)
}

// unchangedSince refuses (a conflict) when the bucket changed after
// revision since; 0 is no such condition.
func (s *Store) unchangedSince(ctx context.Context, since uint64) error {
	if since == 0 {
		return nil
	}
	last, err := s.lastRevision(ctx)
	if err != nil {
		return err
	}
	if last > since {
		return fmt.Errorf("%w: the bucket is at revision %d, changed since the diff at %d: diff again", ErrConflict, last, since)
	}
	return nil
}
