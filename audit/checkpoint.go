package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/internal/fsutil"
)

// This file holds the node's signed checkpoints: the document, its
// signature and parsing, the node's Ed25519 key, and the Checkpointer that
// tracks what the node wrote and publishes checkpoints. The verifier's
// side is in verify.go; the format is specified in docs/audit.md.

// CheckpointType is the "type" of a checkpoint record. Checkpoints share
// the audit stream with events but are not events: they belong to no turn.
const CheckpointType Type = "audit.checkpoint"

// CheckpointVersion is the checkpoint format version ("v").
const CheckpointVersion = 1

// Defaults for CheckpointOptions.
const (
	DefaultCheckpointInterval = 5 * time.Second
	// DefaultCheckpointTurns bounds the turns one checkpoint lists; more
	// changed turns are spread over consecutive checkpoints. 2000 entries
	// stay well below NATS's default 1 MiB payload.
	DefaultCheckpointTurns = 2000
	defaultPublishTimeout  = 5 * time.Second
)

// Checkpoint is a node's signed statement about the events it wrote.
//
// Each node keeps one chain of checkpoints: Seq counts from 0 and PrevHash
// is the hex SHA-256 of the previous checkpoint's exact record bytes
// (signature included), "" for seq 0. Turns lists, for every turn that
// received events since the previous checkpoint, the turn's head at the
// time: its last sequence number and that event's hash. Because the
// checkpoints chain, the union of their Turns attests every turn head the
// node ever wrote, so a verifier can tell when a turn's events up to an
// attested head are missing.
type Checkpoint struct {
	Type Type   `json:"type"`
	V    int    `json:"v"`
	Node string `json:"node"`
	// Seq numbers the node's checkpoints from 0.
	Seq      uint64    `json:"seq"`
	PrevHash string    `json:"prev_hash"`
	Time     time.Time `json:"time"`
	// KeyID is KeyID(public key); PublicKey is the hex Ed25519 public key
	// the checkpoint is signed with.
	KeyID     string `json:"key_id"`
	PublicKey string `json:"public_key"`
	// Events is the number of events the node handed to the audit stream
	// since its checkpoint chain began (across restarts).
	Events uint64     `json:"events"`
	Turns  []TurnHead `json:"turns"`
}

// TurnHead is the head of one turn's chain as the node wrote it.
type TurnHead struct {
	TurnID string `json:"turn_id"`
	Tenant string `json:"tenant"`
	// Seq is the turn's last event's sequence number, Hash that event's
	// record hash.
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
	// Closed says the event at Seq is turn.closed: the chain ends there.
	Closed bool `json:"closed,omitempty"`
}

// CheckpointSubject is the subject node publishes its checkpoints on:
// "<prefix>.audit.checkpoint.<node>". Checkpoints are stored as they are,
// one per message, next to the segments ("<prefix>.audit.seg.<tenant>");
// a segment filter never matches them.
func CheckpointSubject(prefix, node string) string {
	return prefix + ".audit.checkpoint." + node
}

// IsCheckpoint reports whether data is a checkpoint record in its canonical
// form (it starts with the checkpoint type). A record that is not in the
// canonical form is judged as an event and fails there.
func IsCheckpoint(data []byte) bool {
	return bytes.HasPrefix(data, checkpointPrefix)
}

var checkpointPrefix = []byte(`{"type":"` + string(CheckpointType) + `"`)

const sigMember = `,"sig":"`

// appendCheckpoint writes cp's canonical, unsigned form: compact JSON in
// field order, the bytes encoding/json gives for Checkpoint (with Turns
// written as [] when empty). These are the signed bytes.
func appendCheckpoint(b []byte, cp *Checkpoint) []byte {
	b = append(b, `{"type":`...)
	b = appendString(b, string(cp.Type))
	b = append(b, `,"v":`...)
	b = strconv.AppendInt(b, int64(cp.V), 10)
	b = append(b, `,"node":`...)
	b = appendString(b, cp.Node)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, cp.Seq, 10)
	b = append(b, `,"prev_hash":`...)
	b = appendString(b, cp.PrevHash)
	b = append(b, `,"time":`...)
	b = appendTime(b, cp.Time)
	b = append(b, `,"key_id":`...)
	b = appendString(b, cp.KeyID)
	b = append(b, `,"public_key":`...)
	b = appendString(b, cp.PublicKey)
	b = append(b, `,"events":`...)
	b = strconv.AppendUint(b, cp.Events, 10)
	b = append(b, `,"turns":[`...)
	for i, t := range cp.Turns {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"turn_id":`...)
		b = appendString(b, t.TurnID)
		b = append(b, `,"tenant":`...)
		b = appendString(b, t.Tenant)
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, t.Seq, 10)
		b = append(b, `,"hash":`...)
		b = appendString(b, t.Hash)
		if t.Closed {
			b = append(b, `,"closed":true`...)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// SignCheckpoint fills cp's Type, V, KeyID and PublicKey from key, and
// returns the checkpoint record: the canonical unsigned form with a last
// member "sig", the hex Ed25519 signature of the unsigned form.
func SignCheckpoint(cp *Checkpoint, key ed25519.PrivateKey) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("audit: sign checkpoint: not an Ed25519 private key")
	}
	if y := cp.Time.Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("audit: sign checkpoint: time %s is outside years 0-9999", cp.Time)
	}
	pub := key.Public().(ed25519.PublicKey)
	cp.Type, cp.V = CheckpointType, CheckpointVersion
	cp.KeyID, cp.PublicKey = KeyID(pub), hex.EncodeToString(pub)
	body := appendCheckpoint(make([]byte, 0, 512+len(cp.Turns)*192), cp)
	sig := ed25519.Sign(key, body)
	rec := append(body[:len(body)-1], sigMember...)
	rec = hex.AppendEncode(rec, sig)
	return append(rec, `"}`...), nil
}

// ParsedCheckpoint is a checkpoint record taken apart.
type ParsedCheckpoint struct {
	Checkpoint
	// Body is the signed bytes: the record without its "sig" member.
	Body []byte
	Sig  []byte
	// Hash is HashData of the whole record: the next checkpoint's PrevHash.
	Hash string
}

// ParseCheckpoint takes a checkpoint record apart without checking its
// signature (see ParsedCheckpoint.VerifySignature). It fails for a record
// that is not exactly a canonical checkpoint followed by its signature.
func ParseCheckpoint(data []byte) (*ParsedCheckpoint, error) {
	i := bytes.LastIndex(data, []byte(sigMember))
	if i < 0 || !bytes.HasSuffix(data, []byte(`"}`)) {
		return nil, errors.New("audit: checkpoint: no trailing \"sig\" member")
	}
	sigHex := data[i+len(sigMember) : len(data)-2]
	if len(sigHex) != 2*ed25519.SignatureSize {
		return nil, fmt.Errorf("audit: checkpoint: signature is %d hex digits, want %d", len(sigHex), 2*ed25519.SignatureSize)
	}
	p := &ParsedCheckpoint{Sig: make([]byte, ed25519.SignatureSize), Hash: HashData(data)}
	if _, err := hex.Decode(p.Sig, sigHex); err != nil {
		return nil, fmt.Errorf("audit: checkpoint: signature: %w", err)
	}
	p.Body = append(slices.Clip(data[:i]), '}')
	dec := json.NewDecoder(bytes.NewReader(p.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p.Checkpoint); err != nil {
		return nil, fmt.Errorf("audit: checkpoint: %w", err)
	}
	switch {
	case p.Type != CheckpointType:
		return nil, fmt.Errorf("audit: checkpoint: type %q", p.Type)
	case p.V != CheckpointVersion:
		return nil, fmt.Errorf("audit: checkpoint: version %d, this verifier reads %d", p.V, CheckpointVersion)
	case !bytes.Equal(appendCheckpoint(nil, &p.Checkpoint), p.Body):
		// Only the canonical form is accepted, so what was signed has one
		// reading (no duplicate keys, no alternative encodings).
		return nil, errors.New("audit: checkpoint: not in canonical form")
	}
	return p, nil
}

// PublicKeyBytes decodes the embedded public key.
func (p *ParsedCheckpoint) PublicKeyBytes() (ed25519.PublicKey, error) {
	pub, err := hex.DecodeString(p.PublicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("audit: checkpoint: public_key is not a hex Ed25519 public key")
	}
	return pub, nil
}

// VerifySignature checks the signature with pub, which must also be the
// key the checkpoint names (key_id and public_key).
func (p *ParsedCheckpoint) VerifySignature(pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize {
		return errors.New("audit: checkpoint: not an Ed25519 public key")
	}
	if p.KeyID != KeyID(pub) || p.PublicKey != hex.EncodeToString(pub) {
		return fmt.Errorf("audit: checkpoint names key %s, not %s", p.KeyID, KeyID(pub))
	}
	if !ed25519.Verify(pub, p.Body, p.Sig) {
		return errors.New("audit: checkpoint: bad signature")
	}
	return nil
}

// ---- keys ----

// KeyID identifies a public key: the first 16 bytes of its SHA-256, hex.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:16])
}

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
	key, err := ReadPrivateKey(path)
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
		return ReadPrivateKey(path) // created concurrently
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

// ReadPrivateKey reads an Ed25519 private key file (PEM, PKCS #8). The
// error wraps fs.ErrNotExist when there is none.
func ReadPrivateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit: key file: %w", err)
	}
	if runtime.GOOS != "windows" {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("audit: key file %s has mode %v: it must not be accessible to group or others (chmod 600)", path, st.Mode().Perm())
		}
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("audit: key file %s: want a PEM \"PRIVATE KEY\" block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("audit: key file %s: %w", path, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("audit: key file %s: %T is not an Ed25519 key", path, k)
	}
	return key, nil
}

// ParsePublicKeys reads trusted public keys: PEM "PUBLIC KEY" blocks
// (PKIX), the JSON `node audit keys --local` prints
// ({"keys":[{"public_key":…}]}), or lines each holding a hex Ed25519
// public key ('#' starts a comment; other words on a line, such as a node
// name, are ignored). In the JSON, an entry's key_id, when present, must
// be its key's, and an entry whose source is "stream" (a key a checkpoint
// claims, which anyone who can write the stream can choose) is refused:
// a trusted key is read from the node.
func ParsePublicKeys(data []byte) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	add := func(pub ed25519.PublicKey) {
		if !slices.ContainsFunc(keys, func(k ed25519.PublicKey) bool { return k.Equal(pub) }) {
			keys = append(keys, pub)
		}
	}
	trimmed := bytes.TrimSpace(data)
	switch {
	case bytes.HasPrefix(trimmed, []byte("-----BEGIN")):
		for rest := trimmed; ; {
			var blk *pem.Block
			blk, rest = pem.Decode(rest)
			if blk == nil {
				break
			}
			if blk.Type != "PUBLIC KEY" {
				return nil, fmt.Errorf("audit: trusted keys: PEM block %q, want \"PUBLIC KEY\"", blk.Type)
			}
			k, err := x509.ParsePKIXPublicKey(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("audit: trusted keys: %w", err)
			}
			pub, ok := k.(ed25519.PublicKey)
			if !ok {
				return nil, fmt.Errorf("audit: trusted keys: %T is not an Ed25519 key", k)
			}
			add(pub)
		}
	case bytes.HasPrefix(trimmed, []byte("{")):
		var doc struct {
			Keys []struct {
				PublicKey string `json:"public_key"`
				KeyID     string `json:"key_id"`
				Source    string `json:"source"`
			} `json:"keys"`
		}
		if err := json.Unmarshal(trimmed, &doc); err != nil {
			return nil, fmt.Errorf("audit: trusted keys: %w", err)
		}
		for _, k := range doc.Keys {
			pub, err := hex.DecodeString(k.PublicKey)
			if err != nil || len(pub) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("audit: trusted keys: %q is not a hex Ed25519 public key", k.PublicKey)
			}
			if k.Source == "stream" {
				return nil, fmt.Errorf("audit: trusted keys: key %s is one the stream's checkpoints carry (\"source\":\"stream\"), not one read from a node: trust the output of node audit keys --local", KeyID(pub))
			}
			if k.KeyID != "" && k.KeyID != KeyID(pub) {
				return nil, fmt.Errorf("audit: trusted keys: key_id %s is not the id of public key %s (%s)", k.KeyID, k.PublicKey, KeyID(pub))
			}
			add(pub)
		}
	default:
		for n, line := range strings.Split(string(trimmed), "\n") {
			if i := strings.IndexByte(line, '#'); i >= 0 {
				line = line[:i]
			}
			found := false
			for _, w := range strings.Fields(line) {
				if pub, err := hex.DecodeString(w); err == nil && len(pub) == ed25519.PublicKeySize {
					add(pub)
					found = true
				}
			}
			if !found && strings.TrimSpace(line) != "" {
				return nil, fmt.Errorf("audit: trusted keys: line %d holds no hex Ed25519 public key", n+1)
			}
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("audit: trusted keys: none found")
	}
	return keys, nil
}

// ---- the checkpointer ----

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
	next    Sink
	flush   func(context.Context) error
	js      jetstream.JetStream
	opts    CheckpointOptions
	subject string
	key     ed25519.PrivateKey
	log     *slog.Logger

	mu     sync.Mutex // guards heads and events
	heads  map[string]*TurnHead
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
func StartCheckpointer(ctx context.Context, nc *nats.Conn, next Sink, opts CheckpointOptions) (*Checkpointer, error) {
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
	if opts.Node == "" || !plainToken(opts.Node) {
		return nil, fmt.Errorf("audit: checkpoints: node id %q must be one subject token of [A-Za-z0-9_-]", opts.Node)
	}
	if !validSubjectTokens(opts.Prefix) {
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
		subject: CheckpointSubject(opts.Prefix, opts.Node),
		key:     key,
		log:     opts.Logger.With(slog.String("component", "audit.checkpoint")),
		heads:   map[string]*TurnHead{},
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
	var local, stored *ParsedCheckpoint
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
	if head.KeyID != KeyID(c.key.Public().(ed25519.PublicKey)) {
		c.log.Warn("continuing a checkpoint chain signed by another key (key rotated)", "previous_key", head.KeyID)
	}
	c.seq, c.prevHash, c.events = head.Seq+1, head.Hash, head.Events
	c.last = slices.Clone(headData)
	return nil
}

// ownCheckpoint parses a checkpoint of this node and checks it against
// the key it names.
func (c *Checkpointer) ownCheckpoint(data []byte) (*ParsedCheckpoint, error) {
	p, err := ParseCheckpoint(data)
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
func (c *Checkpointer) Emit(rec *Record) Receipt {
	if rec != nil && rec.Event != nil {
		ev := rec.Event
		c.mu.Lock()
		h := c.heads[ev.TurnID]
		if h == nil {
			h = &TurnHead{TurnID: ev.TurnID, Tenant: ev.Tenant, Seq: ev.Seq}
			c.heads[ev.TurnID] = h
		}
		if ev.Seq >= h.Seq {
			h.Seq, h.Hash, h.Closed = ev.Seq, rec.Hash, ev.Type == TurnClosed
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
			c.heads = make(map[string]*TurnHead, n)
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
func (c *Checkpointer) sign(heads map[string]*TurnHead, events uint64) error {
	turns := make([]TurnHead, 0, len(heads))
	for _, h := range heads {
		turns = append(turns, *h)
	}
	slices.SortFunc(turns, func(a, b TurnHead) int { return strings.Compare(a.TurnID, b.TurnID) })
	now := c.opts.Clock().UTC()
	for len(turns) > 0 {
		n := min(len(turns), c.opts.MaxTurns)
		cp := &Checkpoint{Node: c.opts.Node, Seq: c.seq, PrevHash: c.prevHash, Time: now, Events: events, Turns: turns[:n:n]}
		rec, err := SignCheckpoint(cp, c.key)
		if err != nil {
			return err
		}
		c.pending = append(c.pending, rec)
		c.seq++
		c.prevHash = HashData(rec)
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
