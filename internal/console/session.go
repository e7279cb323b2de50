package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"sync"
	"time"
)

// Defaults of the login and session bounds.
const (
	// DefaultLoginTTL is how long a login link may be followed.
	DefaultLoginTTL = 2 * time.Minute
	// DefaultSessionTTL is how long a session lasts from sign-in
	// (no sliding renewal: a new link is a new session).
	DefaultSessionTTL = 8 * time.Hour
	// DefaultMaxSessions bounds the sessions and the pending logins held.
	DefaultMaxSessions = 1024
)

// Errors of the session store.
var (
	ErrLoginInvalid = errors.New("console: login link unknown, used or expired")
	ErrTooMany      = errors.New("console: too many sessions or pending logins")
)

// session is one signed-in browser.
type session struct {
	identity string
	csrf     string
	expires  time.Time
}

// sessions holds the pending login tokens and the sessions, by the
// SHA-256 of their secret (what a memory dump or a log shows is no
// credential). Safe for concurrent use.
//
// Invariants: a login token is redeemed at most once and not after its
// expiry; a session is found only before its expiry; neither map holds
// more than max entries (expired ones are dropped first).
type sessions struct {
	mu       sync.Mutex
	now      func() time.Time
	loginTTL time.Duration
	ttl      time.Duration
	max      int
	logins   map[[32]byte]pending
	live     map[[32]byte]*session
}

type pending struct {
	identity string
	expires  time.Time
}

func newSessions(now func() time.Time, loginTTL, ttl time.Duration, max int) *sessions {
	return &sessions{now: now, loginTTL: loginTTL, ttl: ttl, max: max,
		logins: map[[32]byte]pending{}, live: map[[32]byte]*session{}}
}

// secret is 32 random bytes, base64url without padding (43 characters).
func secret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func digest(s string) [32]byte { return sha256.Sum256([]byte(s)) }

// issue makes a login token for identity.
func (s *sessions) issue(identity string) (string, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.logins) >= s.max {
		for k, p := range s.logins {
			if !now.Before(p.expires) {
				delete(s.logins, k)
			}
		}
		if len(s.logins) >= s.max {
			return "", time.Time{}, ErrTooMany
		}
	}
	tok := secret()
	exp := now.Add(s.loginTTL)
	s.logins[digest(tok)] = pending{identity: identity, expires: exp}
	return tok, exp, nil
}

// redeem consumes a login token and starts a session: its cookie value
// and the session.
func (s *sessions) redeem(tok string) (string, *session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	k := digest(tok)
	p, ok := s.logins[k]
	delete(s.logins, k) // used once, whatever happens next
	if !ok || !now.Before(p.expires) {
		return "", nil, ErrLoginInvalid
	}
	if len(s.live) >= s.max {
		for k, ss := range s.live {
			if !now.Before(ss.expires) {
				delete(s.live, k)
			}
		}
		if len(s.live) >= s.max {
			return "", nil, ErrTooMany
		}
	}
	cookie := secret()
	ss := &session{identity: p.identity, csrf: secret(), expires: now.Add(s.ttl)}
	s.live[digest(cookie)] = ss
	return cookie, ss, nil
}

// lookup finds the session of a cookie value.
func (s *sessions) lookup(cookie string) (*session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := digest(cookie)
	ss, ok := s.live[k]
	if ok && !s.now().Before(ss.expires) {
		delete(s.live, k)
		return nil, false
	}
	return ss, ok
}

// end forgets a session.
func (s *sessions) end(cookie string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.live, digest(cookie))
}

// checkCSRF reports whether got is the session's CSRF token.
func (ss *session) checkCSRF(got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(ss.csrf)) == 1
}
