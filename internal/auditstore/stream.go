package auditstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sharedos/sharedos/audit"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrStreamUnusable is wrapped by the error NewJetStreamSink returns when
// the audit stream exists but cannot serve the sink (see StreamNeeds).
// The sink never changes such a stream: the operator does, with the
// commands the error names.
var ErrStreamUnusable = errors.New("audit: the audit stream cannot serve this node")

// segmentHeaderRoom is what a segment message's headers (Nats-Msg-Id and
// Sharedos-Segment) take beside its payload, with room to spare; a
// stream's max_msg_size must fit MaxSegmentBytes plus this.
const segmentHeaderRoom = 256

// StreamNeeds is what a sink needs of its stream, and how it creates the
// stream when it is missing.
//
// The sink owns the stream only when it creates it. An existing stream is
// checked (Problems) and never updated — its limits, deny flags,
// placement and everything the checks do not name stay as the operator
// set them — with one exception: a stream of exactly the shape nodes made
// before segments (subjects "<prefix>.audit.>" and nothing else) has its
// subjects moved to StreamSubjects, once, and nothing else changed.
type StreamNeeds struct {
	Stream string
	Prefix string
	// Replicas is the least replica count the sink accepts, and the count
	// it creates the stream with.
	Replicas int
	// DuplicateWindow is the least deduplication window the sink accepts,
	// and the window it creates the stream with.
	DuplicateWindow time.Duration
	// MaxSegmentBytes is the largest segment the sink writes in the
	// ordinary course; the stream's max_msg_size must admit it.
	MaxSegmentBytes int
	// Live is whether the sink publishes live copies: then the stream
	// must not capture the live subjects (it would store every record
	// twice).
	Live bool
	// MaxAge and MaxBytes are the retention the sink creates the stream
	// with (0: unlimited). They are not checked on an existing stream.
	MaxAge   time.Duration
	MaxBytes int64
}

// Config is the stream the sink creates when it is missing: file storage,
// limits retention, the segment and checkpoint subjects, discard old,
// message deletes and purges denied (the trail is append-only through the
// API; retention still ages records out), and the configured replicas,
// duplicate window, max age and max bytes.
func (n StreamNeeds) Config() jetstream.StreamConfig {
	maxBytes := n.MaxBytes
	if maxBytes <= 0 {
		maxBytes = -1
	}
	return jetstream.StreamConfig{
		Name:        n.Stream,
		Description: "SharedOS audit trail: segments of hash-chained turn events, and node checkpoints",
		Subjects:    audit.StreamSubjects(n.Prefix),
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      n.MaxAge,
		MaxBytes:    maxBytes,
		Replicas:    n.Replicas,
		Duplicates:  n.DuplicateWindow,
		Discard:     jetstream.DiscardOld,
		DenyDelete:  true,
		DenyPurge:   true,
		// PersistMode is left at the default: the stream never opts into
		// asynchronous persistence, so an ack means the segment was
		// written to the store. Surviving a machine crash (not just a
		// process crash) additionally needs the server to fsync every
		// write: sync_always, which the embedded server sets
		// (natsserver.Options.SyncAlways); for an external cluster it is
		// the operator's choice (or Replicas > 1). One fsync covers a
		// whole segment.
		PersistMode: jetstream.DefaultPersistMode,
	}
}

// StreamProblem is one reason an existing stream cannot serve the sink,
// and what fixes it.
type StreamProblem struct {
	What string // what is wrong, e.g. "storage is memory; the audit trail needs file storage"
	Fix  string // the command (or step) that fixes it
}

func (p StreamProblem) String() string { return p.What + " — fix: " + p.Fix }

// legacySubject is the one subject of an audit stream made before
// segments.
func legacySubject(prefix string) string { return prefix + ".audit.>" }

// liveSubjects matches exactly the live subjects: after "live", the tenant
// and a type of two or more tokens (a stream of "<prefix>.audit.*.*"
// captures none of them).
func liveSubjects(prefix string) string { return prefix + ".audit.live.*.*.>" }

// IsLegacyStream reports whether cfg is the shape of an audit stream made
// before segments: its subjects exactly "<prefix>.audit.>", not a mirror,
// not sealed. Such a stream is moved to StreamSubjects once.
func IsLegacyStream(cfg jetstream.StreamConfig, prefix string) bool {
	return len(cfg.Subjects) == 1 && cfg.Subjects[0] == legacySubject(prefix) &&
		cfg.Mirror == nil && !cfg.Sealed
}

// Problems lists what keeps the existing stream cfg from serving a sink
// with these needs, each with its fix; nil when it can serve. It checks
// only what the sink needs: the subjects it writes are captured (and the
// live copies are not), file storage, limits retention, at least Replicas
// replicas, at least DuplicateWindow, acknowledged writes, room for a
// segment, not sealed. Deny flags, retention limits, placement and the
// rest are the operator's.
func (n StreamNeeds) Problems(cfg jetstream.StreamConfig) []StreamProblem {
	var ps []StreamProblem
	edit := "nats stream edit " + n.Stream
	if cfg.Sealed {
		ps = append(ps, StreamProblem{
			What: "the stream is sealed: it takes no more messages",
			Fix:  "a sealed stream cannot be unsealed; set audit.stream to another stream (the node creates it) and keep this one as the archive",
		})
	}
	if cfg.Mirror != nil {
		ps = append(ps, StreamProblem{
			What: "the stream is a mirror of " + cfg.Mirror.Name + ": it takes no publishes",
			Fix:  "set audit.stream to the stream the node writes (the node creates it when missing)",
		})
	}
	needed, live := audit.StreamSubjects(n.Prefix), liveSubjects(n.Prefix)
	var missing []string
	for _, need := range needed {
		if !slices.ContainsFunc(cfg.Subjects, func(s string) bool { return subjectCovers(s, need) }) {
			missing = append(missing, need)
		}
	}
	var capturing []string
	if n.Live {
		for _, s := range cfg.Subjects {
			if subjectsCollide(s, live) {
				capturing = append(capturing, s)
			}
		}
	}
	if cfg.Mirror == nil && (len(missing) > 0 || len(capturing) > 0) {
		// The fix keeps the operator's other subjects.
		var want []string
		for _, s := range cfg.Subjects {
			if !slices.Contains(capturing, s) &&
				!slices.ContainsFunc(needed, func(need string) bool { return subjectCovers(need, s) }) {
				want = append(want, s)
			}
		}
		for _, s := range needed {
			if !slices.ContainsFunc(want, func(w string) bool { return subjectCovers(w, s) }) {
				want = append(want, s)
			}
		}
		fix := edit + " --subjects '" + strings.Join(want, ",") + "'"
		if len(missing) > 0 {
			ps = append(ps, StreamProblem{
				What: fmt.Sprintf("subjects %s do not capture %s, which the node writes", quoteList(cfg.Subjects), strings.Join(missing, " and ")),
				Fix:  fix,
			})
		}
		if len(capturing) > 0 {
			ps = append(ps, StreamProblem{
				What: fmt.Sprintf("subjects %s capture the live copies %s, so every record would be stored twice", quoteList(capturing), live),
				Fix:  fix,
			})
		}
	}
	if cfg.Storage != jetstream.FileStorage {
		ps = append(ps, StreamProblem{
			What: "storage is " + strings.ToLower(cfg.Storage.String()) + "; the audit trail needs file storage",
			Fix: "storage cannot be edited: copy the records to a file stream (nats stream backup " + n.Stream +
				" DIR keeps them), remove this one (nats stream rm " + n.Stream + ") and start the node, which creates it; or set audit.stream to another stream",
		})
	}
	switch cfg.Retention {
	case jetstream.LimitsPolicy:
	case jetstream.InterestPolicy:
		ps = append(ps, StreamProblem{
			What: "retention is interest: records would be removed once consumers acknowledged them, or at once without consumers",
			Fix:  edit + " --retention limits",
		})
	default:
		ps = append(ps, StreamProblem{
			What: "retention is " + strings.ToLower(cfg.Retention.String()) + ": records would be removed as they are consumed",
			Fix:  "work-queue retention cannot be edited: remove the stream (nats stream rm " + n.Stream + ") and start the node, which creates it; or set audit.stream to another stream",
		})
	}
	if cfg.Replicas < n.Replicas {
		ps = append(ps, StreamProblem{
			What: fmt.Sprintf("replicas %d, fewer than audit.replicas %d", max(cfg.Replicas, 1), n.Replicas),
			Fix:  fmt.Sprintf("%s --replicas %d (or lower audit.replicas)", edit, n.Replicas),
		})
	}
	if cfg.Duplicates < n.DuplicateWindow {
		ps = append(ps, StreamProblem{
			What: fmt.Sprintf("duplicate window %s, shorter than audit.duplicate_window %s (a segment or checkpoint published again within it must be stored once)", cfg.Duplicates, n.DuplicateWindow),
			Fix:  fmt.Sprintf("%s --dupe-window %s (or lower audit.duplicate_window)", edit, n.DuplicateWindow),
		})
	}
	if cfg.NoAck {
		ps = append(ps, StreamProblem{
			What: "no_ack is set: the stream does not acknowledge writes, and a record counts as stored only when acknowledged",
			Fix:  edit + " --ack",
		})
	}
	if need := int32(min(n.MaxSegmentBytes+segmentHeaderRoom, 1<<31-1)); cfg.MaxMsgSize > 0 && cfg.MaxMsgSize < need {
		ps = append(ps, StreamProblem{
			What: fmt.Sprintf("max message size %d, smaller than a segment (audit.segment_max_bytes %d plus headers)", cfg.MaxMsgSize, n.MaxSegmentBytes),
			Fix:  fmt.Sprintf("%s --max-msg-size %d (or lower audit.segment_max_bytes)", edit, need),
		})
	}
	return ps
}

// unusableError is the error of a stream with problems: one line naming
// each problem and its fix.
func unusableError(stream string, ps []StreamProblem) error {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString("(" + strconv.Itoa(i+1) + ") " + p.String())
	}
	return fmt.Errorf("%w: stream %s (left unchanged): %s", ErrStreamUnusable, stream, b.String())
}

func quoteList(ss []string) string {
	if len(ss) == 0 {
		return "(none)"
	}
	return "'" + strings.Join(ss, ",") + "'"
}

// ensureStream creates the audit stream when it is missing, or checks the
// existing one (moving a legacy stream's subjects first); see
// StreamNeeds.
func ensureStream(ctx context.Context, js jetstream.JetStream, n StreamNeeds, log *slog.Logger) error {
	st, err := js.Stream(ctx, n.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, n.Config())
		if err == nil {
			log.Info("audit stream created", "replicas", n.Replicas, "max_age", n.MaxAge, "max_bytes", n.MaxBytes,
				"duplicate_window", n.DuplicateWindow, "deny_delete", true, "deny_purge", true)
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("audit: create stream %s: %w", n.Stream, err)
		}
		// Another node created it meanwhile, differently: check it.
		st, err = js.Stream(ctx, n.Stream)
	}
	if err != nil {
		return fmt.Errorf("audit: stream %s: %w", n.Stream, err)
	}
	cfg := st.CachedInfo().Config
	if IsLegacyStream(cfg, n.Prefix) {
		moved := cfg
		moved.Subjects = audit.StreamSubjects(n.Prefix)
		if ps := n.Problems(moved); len(ps) > 0 {
			return fmt.Errorf("%w (a stream made before segments: once it can serve, the node moves its subjects %s to %s)",
				unusableError(n.Stream, ps), legacySubject(n.Prefix), strings.Join(moved.Subjects, ","))
		}
		if _, err := js.UpdateStream(ctx, moved); err != nil {
			return fmt.Errorf("audit: stream %s: move the subjects %s of a stream made before segments to %s: %w",
				n.Stream, legacySubject(n.Prefix), strings.Join(moved.Subjects, ","), err)
		}
		log.Warn("audit stream made before segments: its subjects moved, nothing else changed; its per-event messages stay readable",
			"from", legacySubject(n.Prefix), "to", strings.Join(moved.Subjects, ","))
		return nil
	}
	if ps := n.Problems(cfg); len(ps) > 0 {
		return unusableError(n.Stream, ps)
	}
	return nil
}

// subjectCovers reports whether every subject filter sub matches is also
// matched by filter (both may hold the wildcards "*" and ">").
func subjectCovers(filter, sub string) bool {
	f, s := strings.Split(filter, "."), strings.Split(sub, ".")
	for i, tok := range s {
		if i >= len(f) {
			return false
		}
		switch f[i] {
		case ">":
			return true
		case "*":
			if tok == ">" {
				return false
			}
		default:
			if tok != f[i] {
				return false
			}
		}
	}
	return len(f) == len(s)
}

// subjectsCollide reports whether some subject is matched by both
// filters.
func subjectsCollide(a, b string) bool {
	x, y := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(x) && i < len(y); i++ {
		if x[i] == ">" || y[i] == ">" {
			return true
		}
		if x[i] != y[i] && x[i] != "*" && y[i] != "*" {
			return false
		}
	}
	return len(x) == len(y)
}
