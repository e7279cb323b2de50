package projection

import "sync"

// Cache keeps translated tools across projections: each tool's canonical
// bytes and token count (or its reasons), keyed by (revision, profile,
// alias, token method, bounds). The revision names the whole contract, so
// an entry can only be served for the same contract; the alias is in the
// key because it is in the bytes. Tools without a revision are never
// cached. It holds about max entries (two generations of max/2: the older
// is dropped when the newer fills) and is safe for concurrent use.
type Cache struct {
	max int

	mu   sync.Mutex
	cur  map[cacheKey]*entry
	prev map[cacheKey]*entry
}

type cacheKey struct {
	revision string
	profile  Profile
	alias    string
	method   string
	bounds   bounds
}

// entry is immutable once built.
type entry struct {
	json             []byte
	tokens           int
	optional, unions int // what the tool adds to a request's limits
	reasons          []Reason
}

// NewCache returns a Cache of about max entries (at least 2).
func NewCache(max int) *Cache {
	if max < 2 {
		max = 2
	}
	return &Cache{max: max, cur: make(map[cacheKey]*entry)}
}

// Len is the number of entries held.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.prev)
}

// entry returns the cached entry for k, building it with f on a miss. A
// nil Cache builds every time.
func (c *Cache) entry(k cacheKey, f func() *entry) *entry {
	if c == nil || k.revision == "" {
		return f()
	}
	c.mu.Lock()
	e, ok := c.cur[k]
	if !ok {
		if e, ok = c.prev[k]; ok {
			c.put(k, e)
		}
	}
	c.mu.Unlock()
	if ok {
		return e
	}
	e = f()
	c.mu.Lock()
	c.put(k, e)
	c.mu.Unlock()
	return e
}

func (c *Cache) put(k cacheKey, e *entry) {
	if len(c.cur) >= c.max/2 {
		c.prev, c.cur = c.cur, make(map[cacheKey]*entry, c.max/2)
	}
	c.cur[k] = e
}
