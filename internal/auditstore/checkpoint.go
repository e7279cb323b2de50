package auditstore

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/internal/fsutil"
)

// This file holds the node's side of signed checkpoints: the Checkpointer
// that tracks what the node wrote and publishes checkpoints, where a node
// keeps its key and its last checkpoint, and the creation of its key. The
// checkpoint document, its signature and the key files' format are the
// audit package's.

// Defaults for CheckpointOptions.
const (
	DefaultCheckpointInterval = 5 * time.Second
	// DefaultCheckpointTurns bounds the turns one checkpoint lists; more
	// changed turns are spread over consecutive checkpoints. 2000 entries
	// stay well below NATS's default 1 MiB payload.
	DefaultCheckpointTurns = 2000
	defaultPublishTimeout  = 5 * time.Second
)

// DefaultKeyFile is where a node keeps its checkpoint signing key.
func DefaultKeyFile(dataDir string) string {
	return filepath.Join(dataDir, "keys", "audit-ed25519.key")
}

// DefaultStateFile is where a node keeps its last published checkpoint.
func DefaultStateFile(dataDir string) string {
	return filepath.Join(dataDir, "audit", "checkpoint.json")
}

// LoadOrCreateKey reads the Ed25519 private key in path (PEM, PKCS #8, as
// `openssl genpkey -algorithm ed25519` writes it), creating one (mode
// 0600, directory 0700) if the file does not exist. A key file that group
// or others may read is refused.
func LoadOrCreateKey(path string) (ed25519.PrivateKey, error) {
	key, err := audit.ReadPrivateKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	_, key, err = ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("audit: generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("audit: encode key: %w", err)
	}
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := fsutil.CreateOnce(path, pemBytes); errors.Is(err, fs.ErrExist) {
		return audit.ReadPrivateKey(path) // created concurrently
	} else if err != nil {
		return nil, fmt.Errorf("audit: create key file: %w", err)
	}
	return key, nil
}

// lastStored reads this node's last checkpoint from the stream. Each
// attempt is bounded: a replicated stream answers nothing until its
// leader is elected (a cluster starting), so an unanswered read is tried
// again, until ctx ends.
func (c *Checkpointer) lastStored(ctx context.Context) (*jetstream.RawStreamMsg, error) {
	for {
		actx, cancel := context.WithTimeout(ctx, checkpointReadAttempt)
		stream, err := c.js.Stream(actx, c.opts.Stream)
		var msg *jetstream.RawStreamMsg
		if err == nil {
			msg, err = stream.GetLastMsgForSubject(actx, c.subject)
		}
		cancel()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return msg, err
		}
	}
}

// checkpointReadAttempt bounds one attempt at reading the last checkpoint.
const checkpointReadAttempt = 2 * time.Second

// CheckpointOptions configures a Checkpointer.
type CheckpointOptions struct {
	// Node names the node; required, a single subject token.
	Node string
	// Prefix and Stream default to DefaultPrefix and DefaultStream; they
	// must match the JetStreamSink's.
	Prefix, Stream string
	// Key signs the checkpoints. When nil, KeyFile is loaded, or created
	// by LoadOrCreateKey.
	Key     ed25519.PrivateKey
	KeyFile string
	// StateFile, when set, keeps the last published checkpoint record, so
	// a restarted node continues its chain even if the stream lost the
	// tail of it (the gap then shows), and so an operator has an anchor
	// for `node audit verify --anchor`.
	StateFile string
	// Interval between checkpoints, default DefaultCheckpointInterval. A
	// checkpoint is published only when events were written since the
	// last one. Negative: none periodically (Checkpoint and Close only).
	Interval time.Duration
	// MaxTurns bounds the turns per checkpoint, default DefaultCheckpointTurns.
	MaxTurns int
	// PublishTimeout bounds each periodic checkpoint, default 5s.
	PublishTimeout time.Duration
	Logger         *slog.Logger
	// Clock stamps checkpoints; default time.Now.
	Clock func() time.Time
}

// Checkpointer is a Sink decorator: it hands every record on to the next
// sink and remembers, per turn, the last sequence number and hash it
// passed, then periodically publishes a signed Checkpoint of the turns
// that changed. Emit is safe for concurrent use and adds one map update
// under a mutex; memory holds only the turns changed since the last
// checkpoint.
//
// Before publishing, the Checkpointer waits for the next sink to store
// what it was handed (when that sink has a Flush method, as JetStreamSink
// does), so a checkpoint is stored after the events it attests. A
// checkpoint that fails to publish is retried, byte for byte, before any
// new one is made; its message id is derived from its content, so a
// retry the stream already stored is dropped as a duplicate.
type Checkpointer struct {
	next    audit.Sink
	flush   func(context.Context) error
	js      jetstream.JetStream
	opts    CheckpointOptions
	subject string
	key     ed25519.PrivateKey
	log     *slog.Logger

	mu     sync.Mutex // guards heads and events
	heads  map[string]*audit.TurnHead
	events uint64

	pubMu    sync.Mutex // serializes making and publishing checkpoints
	seq      uint64     // the next checkpoint's Seq
	prevHash string
	pending  [][]byte // signed, not yet acknowledged, in chain order
	last     []byte   // the last acknowledged checkpoint record

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// StartCheckpointer continues the node's checkpoint chain from the later
// of its state file and the stream's last checkpoint on its subject, and
// starts publishing. next is the sink records go to (the JetStreamSink,
// or a decorator of it); nc reaches the stream. ctx bounds the start only.
// Close stops it.
func StartCheckpointer(ctx context.Context, nc *nats.Conn, next audit.Sink, opts CheckpointOptions) (*Checkpointer, error) {
	if nc == nil || next == nil {
		return nil, errors.New("audit: StartCheckpointer: nil connection or sink")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Stream == "" {
		opts.Stream = DefaultStream
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultCheckpointInterval
	}
	if opts.MaxTurns <= 0 {
		opts.MaxTurns = DefaultCheckpointTurns
	}
	if opts.PublishTimeout <= 0 {
		opts.PublishTimeout = defaultPublishTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Node == "" || !audit.PlainToken(opts.Node) {
		return nil, fmt.Errorf("audit: checkpoints: node id %q must be one subject token of [A-Za-z0-9_-]", opts.Node)
	}
	if !audit.PlainSubject(opts.Prefix) {
		return nil, fmt.Errorf("audit: checkpoints: invalid subject prefix %q", opts.Prefix)
	}
	key := opts.Key
	if key == nil {
		if opts.KeyFile == "" {
			return nil, errors.New("audit: checkpoints: no Key and no KeyFile")
		}
		var err error
		if key, err = LoadOrCreateKey(opts.KeyFile); err != nil {
			return nil, err
		}
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("audit: checkpoints: Key is not an Ed25519 private key")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("audit: checkpoints: jetstream: %w", err)
	}
	c := &Checkpointer{
		next:    next,
		js:      js,
		opts:    opts,
		subject: audit.CheckpointSubject(opts.Prefix, opts.Node),
		key:     key,
		log:     opts.Logger.With(slog.String("component", "audit.checkpoint")),
		heads:   map[string]*audit.TurnHead{},
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if f, ok := next.(interface{ Flush(context.Context) error }); ok {
		c.flush = f.Flush
	}
	if err := c.resume(ctx); err != nil {
		return nil, err
	}
	if opts.Interval > 0 {
		go c.loop()
	} else {
		close(c.done)
	}
	return c, nil
}

// resume sets the chain position from the state file and the stream.
func (c *Checkpointer) resume(ctx context.Context) error {
	var local, stored *audit.ParsedCheckpoint
	var localData, storedData []byte
	if c.opts.StateFile != "" {
		b, err := os.ReadFile(c.opts.StateFile)
		switch {
		case err == nil:
			localData = bytes.TrimSpace(b)
			if local, err = c.ownCheckpoint(localData); err != nil {
				return fmt.Errorf("audit: checkpoint state file %s: %w", c.opts.StateFile, err)
			}
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("audit: checkpoint state file: %w", err)
		}
	}
	msg, err := c.lastStored(ctx)
	if err == nil {
		storedData = msg.Data
		if stored, err = c.ownCheckpoint(storedData); err != nil {
			c.log.Error("the stream's last checkpoint of this node is not valid; continuing from the state file", "err", err)
			stored = nil
		}
	}
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		c.log.Warn("cannot read this node's last checkpoint from the stream; continuing from the state file", "err", err)
	}
	head, headData := stored, storedData
	switch {
	case local == nil:
	case stored == nil:
		head, headData = local, localData
		c.log.Error("the audit stream holds none of this node's checkpoints up to the state file's: it was truncated or purged; the next checkpoint's chain will show the gap",
			"state_seq", local.Seq)
	case local.Seq > stored.Seq:
		head, headData = local, localData
		c.log.Error("the audit stream lacks this node's latest checkpoints: it was truncated; the next checkpoint's chain will show the gap",
			"stream_seq", stored.Seq, "state_seq", local.Seq)
	case local.Seq == stored.Seq && local.Hash != stored.Hash:
		head, headData = local, localData
		c.log.Error("the stream's last checkpoint of this node differs from the state file's: continuing from the state file", "seq", local.Seq)
	}
	if head == nil {
		return nil
	}
	if head.KeyID != audit.KeyID(c.key.Public().(ed25519.PublicKey)) {
		c.log.Warn("continuing a checkpoint chain signed by another key (key rotated)", "previous_key", head.KeyID)
	}
	c.seq, c.prevHash, c.events = head.Seq+1, head.Hash, head.Events
	c.last = slices.Clone(headData)
	return nil
}

// ownCheckpoint parses a checkpoint of this node and checks it against
// the key it names.
func (c *Checkpointer) ownCheckpoint(data []byte) (*audit.ParsedCheckpoint, error) {
	p, err := audit.ParseCheckpoint(data)
	if err != nil {
		return nil, err
	}
	if p.Node != c.opts.Node {
		return nil, fmt.Errorf("checkpoint of node %q, this is %q", p.Node, c.opts.Node)
	}
	pub, err := p.PublicKeyBytes()
	if err == nil {
		err = p.VerifySignature(pub)
	}
	return p, err
}

// PublicKey is the key checkpoints are verified with.
func (c *Checkpointer) PublicKey() ed25519.PublicKey { return c.key.Public().(ed25519.PublicKey) }

// Emit records rec as its turn's head, then hands it to the next sink.
// In that order, a record is in a snapshot of the heads taken after the
// stream stored it: every event stored before a checkpoint is attested by
// that checkpoint's snapshot or the next one (what the verifier holds a
// node to).
func (c *Checkpointer) Emit(rec *audit.Record) audit.Receipt {
	if rec != nil && rec.Event != nil {
		ev := rec.Event
		c.mu.Lock()
		h := c.heads[ev.TurnID]
		if h == nil {
			h = &audit.TurnHead{TurnID: ev.TurnID, Tenant: ev.Tenant, Seq: ev.Seq}
			c.heads[ev.TurnID] = h
		}
		if ev.Seq >= h.Seq {
			h.Seq, h.Hash, h.Closed = ev.Seq, rec.Hash, ev.Type == audit.TurnClosed
		}
		c.events++
		c.mu.Unlock()
	}
	return c.next.Emit(rec)
}

// Last returns the last checkpoint record the stream acknowledged (or the
// one the chain was resumed from), nil if none.
func (c *Checkpointer) Last() []byte {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	return slices.Clone(c.last)
}

// Checkpoint publishes what is pending: first any checkpoint that failed
// before, then — if events were written since — new checkpoints of the
// changed turns. It returns the records published (nil when there was
// nothing to do).
func (c *Checkpointer) Checkpoint(ctx context.Context) ([][]byte, error) {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	if len(c.pending) == 0 {
		c.mu.Lock()
		heads, events := c.heads, c.events
		n := len(heads)
		if n > 0 {
			c.heads = make(map[string]*audit.TurnHead, n)
		}
		c.mu.Unlock()
		if n == 0 {
			// (heads is still c.heads, which Emit writes: not read here.)
			return nil, nil
		}
		if c.flush != nil {
			// Store the attested events first. If they cannot be stored,
			// the checkpoint still says what was written: their absence
			// is what a verifier should see.
			if err := c.flush(ctx); err != nil {
				c.log.Warn("audit events not yet stored before a checkpoint", "err", err)
			}
		}
		if err := c.sign(heads, events); err != nil {
			return nil, err
		}
	}
	var published [][]byte
	for len(c.pending) > 0 {
		rec := c.pending[0]
		if err := c.publish(ctx, rec); err != nil {
			return published, fmt.Errorf("audit: publish checkpoint: %w", err)
		}
		c.pending = c.pending[1:]
		c.last = rec
		published = append(published, rec)
	}
	c.pending = nil
	if c.opts.StateFile != "" && len(published) > 0 {
		if err := fsutil.Replace(c.opts.StateFile, append(slices.Clone(c.last), '\n')); err != nil {
			return published, fmt.Errorf("audit: checkpoint state file: %w", err)
		}
	}
	return published, nil
}

// sign turns a snapshot of heads into signed checkpoints on c.pending.
func (c *Checkpointer) sign(heads map[string]*audit.TurnHead, events uint64) error {
	turns := make([]audit.TurnHead, 0, len(heads))
	for _, h := range heads {
		turns = append(turns, *h)
	}
	slices.SortFunc(turns, func(a, b audit.TurnHead) int { return strings.Compare(a.TurnID, b.TurnID) })
	now := c.opts.Clock().UTC()
	for len(turns) > 0 {
		n := min(len(turns), c.opts.MaxTurns)
		cp := &audit.Checkpoint{Node: c.opts.Node, Seq: c.seq, PrevHash: c.prevHash, Time: now, Events: events, Turns: turns[:n:n]}
		rec, err := audit.SignCheckpoint(cp, c.key)
		if err != nil {
			return err
		}
		c.pending = append(c.pending, rec)
		c.seq++
		c.prevHash = audit.HashData(rec)
		turns = turns[n:]
	}
	return nil
}

func (c *Checkpointer) publish(ctx context.Context, rec []byte) error {
	sum := sha256.Sum256(rec)
	id := "checkpoint-" + c.opts.Node + "-" + hex.EncodeToString(sum[:12])
	ack, err := c.js.Publish(ctx, c.subject, rec, jetstream.WithMsgID(id), jetstream.WithExpectStream(c.opts.Stream))
	if err != nil {
		return err
	}
	if ack.Stream != c.opts.Stream {
		return fmt.Errorf("stored in stream %q, not %q", ack.Stream, c.opts.Stream)
	}
	return nil
}

func (c *Checkpointer) loop() {
	defer close(c.done)
	t := time.NewTicker(c.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), c.opts.PublishTimeout)
			if _, err := c.Checkpoint(ctx); err != nil {
				c.log.Warn("checkpoint not published; retrying at the next interval", "err", err)
			}
			cancel()
		}
	}
}

// Close stops the periodic checkpoints and publishes a final one covering
// everything emitted so far (call it after the last event, before the
// next sink and the connection close). Idempotent; later calls return the
// first call's result.
func (c *Checkpointer) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		close(c.stop)
		<-c.done
		if _, err := c.Checkpoint(ctx); err != nil {
			c.closeErr = fmt.Errorf("audit: final checkpoint: %w", err)
		}
	})
	return c.closeErr
}
