package scenarios

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/bench/harness"
	"github.com/sharedos/sharedos/internal/workpool"
)

// recordBytes is the size of the stand-ins floors publish for audit
// records: about a tool.invoked or tool.completed event.
const recordBytes = 512

// recordsPerCall is how many audit records a call produces (tool.invoked
// and tool.completed); floors publish as many stand-ins.
const recordsPerCall = 2

// Floor shapes.
type floorShape struct {
	// hop asks a provider stand-in (its own TCP connection) over NATS and
	// waits for its answer, as a remote provider's tool is reached.
	hop bool
	// acked publishes the record stand-ins to a JetStream stream and waits
	// for each ack before going on (record before effect, reply after its
	// record); otherwise they are core-NATS publishes nobody stores.
	acked bool
	// sync runs on a server that fsyncs every write (Env.server).
	sync bool
}

// FloorNATS is raw NATS request/reply on the run's server: a requester on
// a TCP connection (as a client), a responder on an in-process connection
// (as the node) echoing the payload from its subscription callback.
func (e *Env) FloorNATS(name string) harness.Scenario {
	return harness.Scenario{
		Name: name, Description: "raw NATS request/reply (TCP requester, in-process responder echoing)",
		Setup: func(ctx context.Context, p harness.Params) (harness.Target, error) {
			var c closer
			prefix := e.prefix()
			nc, err := e.nodeConn("floor-responder-" + prefix)
			if err != nil {
				return nil, err
			}
			c.addConn(nc)
			subject := prefix + ".floor.echo"
			if _, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
				return nil, errors.Join(err, c.close(ctx))
			}
			if err := nc.Flush(); err != nil {
				return nil, errors.Join(err, c.close(ctx))
			}
			cc, err := e.remoteConn("floor-requester-" + prefix)
			if err != nil {
				return nil, errors.Join(err, c.close(ctx))
			}
			c.addConn(cc)
			return &requestTarget{nc: cc, subject: subject, data: payload(p.PayloadBytes), c: c}, nil
		},
	}
}

// FloorComposite is the bare composite: a client (TCP) requests a node (an
// in-process connection), whose subscription hands the request to a
// worker as the front does; the worker optionally hops to a provider
// stand-in over NATS, publishes the audit record stand-ins (core NATS,
// or JetStream awaiting each ack), and replies. No kernel, no msgpack.
func (e *Env) FloorComposite(name string, hop, acked bool) harness.Scenario {
	return e.floorComposite(name, floorShape{hop: hop, acked: acked})
}

// FloorCompositeSync is FloorComposite with acked records on a server
// that fsyncs every write: each stand-in is stored and fsynced on its
// own, as one JetStream publish per audit record would be.
func (e *Env) FloorCompositeSync(name string) harness.Scenario {
	return e.floorComposite(name, floorShape{acked: true, sync: true})
}

func (e *Env) floorComposite(name string, shape floorShape) harness.Scenario {
	hop, acked := shape.hop, shape.acked
	desc := "bare composite: client → node → reply"
	if hop {
		desc = "bare composite: client → node → provider hop → reply"
	}
	if acked {
		desc += fmt.Sprintf(", %d JetStream publishes acked in turn", recordsPerCall)
	} else {
		desc += fmt.Sprintf(", %d core-NATS publishes", recordsPerCall)
	}
	if shape.sync {
		desc += ", fsync on every write"
	}
	return harness.Scenario{
		Name: name, Description: desc,
		Setup: func(ctx context.Context, p harness.Params) (harness.Target, error) {
			return e.startComposite(ctx, shape, p)
		},
	}
}

// FloorJetStream is the physical floor of acked audit in process: the
// record stand-ins published to a JetStream stream from the caller's
// goroutine, each ack awaited before the next.
func (e *Env) FloorJetStream(name string) harness.Scenario {
	return harness.Scenario{
		Name: name, Description: fmt.Sprintf("%d JetStream publishes acked in turn, in process", recordsPerCall),
		Setup: func(ctx context.Context, p harness.Params) (harness.Target, error) {
			var c closer
			prefix := e.prefix()
			nc, err := e.nodeConn("floor-js-" + prefix)
			if err != nil {
				return nil, err
			}
			c.addConn(nc)
			pub, err := newRecordPublisher(ctx, nc, prefix, true, &c)
			if err != nil {
				return nil, errors.Join(err, c.close(ctx))
			}
			return &funcTarget{call: pub.publish, c: c}, nil
		},
	}
}

func (e *Env) startComposite(ctx context.Context, shape floorShape, p harness.Params) (_ harness.Target, err error) {
	var c closer
	defer func() {
		if err != nil {
			err = errors.Join(err, c.close(context.WithoutCancel(ctx)))
		}
	}()
	prefix := e.prefix()
	nodeNC, err := e.nodeConnOn(shape.sync, "floor-node-"+prefix)
	if err != nil {
		return nil, err
	}
	c.addConn(nodeNC)
	pub, err := newRecordPublisher(ctx, nodeNC, prefix, shape.acked, &c)
	if err != nil {
		return nil, err
	}
	providerSubject := prefix + ".floor.provider"
	if shape.hop {
		pc, err := e.remoteConnOn(shape.sync, "floor-provider-"+prefix)
		if err != nil {
			return nil, err
		}
		c.addConn(pc)
		if _, err := pc.Subscribe(providerSubject, func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
			return nil, err
		}
		if err := pc.Flush(); err != nil {
			return nil, err
		}
	}
	pool := workpool.New(64)
	var inflight sync.WaitGroup
	c.add(func(context.Context) error { inflight.Wait(); pool.Close(); return nil })
	subject := prefix + ".floor.call"
	handle := func(m *nats.Msg) {
		inflight.Add(1)
		pool.Go(func() {
			defer inflight.Done()
			reply := m.Data
			if shape.hop {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				r, err := nodeNC.RequestWithContext(ctx, providerSubject, m.Data)
				cancel()
				if err != nil {
					_ = m.Respond([]byte("error: " + err.Error()))
					return
				}
				reply = r.Data
			}
			if err := pub.publish(context.Background(), 0); err != nil {
				_ = m.Respond([]byte("error: " + err.Error()))
				return
			}
			_ = m.Respond(reply)
		})
	}
	sub, err := nodeNC.Subscribe(subject, handle)
	if err != nil {
		return nil, err
	}
	c.add(func(context.Context) error { return sub.Drain() })
	if err := nodeNC.Flush(); err != nil {
		return nil, err
	}
	cc, err := e.remoteConnOn(shape.sync, "floor-client-"+prefix)
	if err != nil {
		return nil, err
	}
	c.addConn(cc)
	return &requestTarget{nc: cc, subject: subject, data: payload(p.PayloadBytes), c: c}, nil
}

// recordPublisher publishes one call's audit record stand-ins.
type recordPublisher struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
	data    []byte
}

func newRecordPublisher(ctx context.Context, nc *nats.Conn, prefix string, acked bool, c *closer) (*recordPublisher, error) {
	p := &recordPublisher{nc: nc, subject: prefix + ".audit.bench.record", data: []byte(strings.Repeat("r", recordBytes))}
	if !acked {
		// Nothing captures the subject: the server routes and drops it.
		p.subject = prefix + ".floor.record"
		return p, nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	stream := "FLOOR_" + strings.ToUpper(prefix)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: stream, Subjects: []string{prefix + ".audit.>"}, Storage: jetstream.FileStorage, MaxAge: time.Hour,
	}); err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", stream, err)
	}
	c.add(deleteStream(nc, stream))
	p.js = js
	return p, nil
}

func (p *recordPublisher) publish(ctx context.Context, _ int) error {
	for range recordsPerCall {
		if p.js == nil {
			if err := p.nc.Publish(p.subject, p.data); err != nil {
				return err
			}
			continue
		}
		f, err := p.js.PublishAsync(p.subject, p.data)
		if err != nil {
			return err
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// requestTarget makes each call a NATS request carrying the payload.
type requestTarget struct {
	nc      *nats.Conn
	subject string
	data    []byte
	c       closer
}

func (t *requestTarget) Open(context.Context) (harness.Turn, error) { return funcTurn{t.request}, nil }

func (t *requestTarget) Close(ctx context.Context) error { return t.c.close(ctx) }

// request is one call; an answer that is not the payload is an error.
func (t *requestTarget) request(ctx context.Context, _ int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := t.nc.RequestWithContext(ctx, t.subject, t.data)
	if err != nil {
		return err
	}
	if len(m.Data) != len(t.data) {
		return fmt.Errorf("floor: unexpected answer %.80q", m.Data)
	}
	return nil
}

// funcTarget calls call; it has no turns.
type funcTarget struct {
	call func(ctx context.Context, i int) error
	c    closer
}

func (t *funcTarget) Open(context.Context) (harness.Turn, error) { return funcTurn{t.call}, nil }
func (t *funcTarget) Close(ctx context.Context) error            { return t.c.close(ctx) }

// funcTurn is a turn of a target without turns: each call is call.
type funcTurn struct {
	call func(ctx context.Context, i int) error
}

func (t funcTurn) Call(ctx context.Context, i int) error { return t.call(ctx, i) }
func (funcTurn) Close(context.Context) error             { return nil }
