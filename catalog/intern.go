package catalog

import (
	"crypto/sha256"
	"sync"
)

// Normalizer normalizes definitions and shares the results: two turns (or
// two principals) whose providers return byte-identical definitions get the
// same immutable *Tool, compiled schema included, instead of re-deriving
// it. It is content-addressed — the key is a hash of the definition's
// bytes and the limits, never of who asked — so it cannot serve one
// principal's catalogue to another the way a context-keyed cache would
// (the alternative ADR 0026 rejects). Safe for concurrent use.
type Normalizer struct {
	limits Limits
	max    int

	mu   sync.Mutex
	cur  map[[32]byte]*Tool
	prev map[[32]byte]*Tool
}

// NewNormalizer returns a Normalizer holding up to about max tools
// (two generations of max/2: the older one is dropped when the newer fills).
func NewNormalizer(lim Limits, max int) *Normalizer {
	if max < 2 {
		max = 2
	}
	return &Normalizer{limits: lim.withDefaults(), max: max, cur: map[[32]byte]*Tool{}}
}

// Limits returns the limits definitions are checked against.
func (n *Normalizer) Limits() Limits { return n.limits }

// Normalize is Normalize with sharing of identical results. Refusals are
// not cached: they are rare and carry their own message.
func (n *Normalizer) Normalize(provider string, d Definition) (*Tool, error) {
	key := definitionKey(provider, d)
	n.mu.Lock()
	t, ok := n.cur[key]
	if !ok {
		if t, ok = n.prev[key]; ok {
			n.put(key, t)
		}
	}
	n.mu.Unlock()
	if ok {
		return t, nil
	}
	t, err := Normalize(provider, d, n.limits)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.put(key, t)
	n.mu.Unlock()
	return t, nil
}

func (n *Normalizer) put(key [32]byte, t *Tool) {
	if len(n.cur) >= n.max/2 {
		n.prev, n.cur = n.cur, make(map[[32]byte]*Tool, n.max/2)
	}
	n.cur[key] = t
}

func definitionKey(provider string, d Definition) [32]byte {
	h := sha256.New()
	for _, f := range [][]byte{
		[]byte(provider), []byte(d.Name), []byte(d.Namespace), []byte(d.Description), []byte(d.Title), d.Icons,
		d.InputSchema, d.OutputSchema, d.Annotations, []byte(d.Capability), []byte(d.Requirement), []byte(d.Token),
	} {
		var n [8]byte
		for i := range n {
			n[i] = byte(uint64(len(f)) >> (8 * i))
		}
		h.Write(n[:])
		h.Write(f)
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}
