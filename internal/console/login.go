package console

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/reason"
)

// LoginSubject is where node asks for a login link:
// "<prefix>.console.<node>.login". It is one node's: the link's token is
// redeemed on that node's HTTP listener.
func LoginSubject(prefix, node string) string { return prefix + ".console." + node + ".login" }

// LoginReply is the answer on LoginSubject: a login link's path and when
// it stops working, or a refusal.
type LoginReply struct {
	// Path is the link's path and query (LoginPath), to append to the
	// node's HTTP address.
	Path string `json:"path,omitempty"`
	// Addr is the node's HTTP listener's address as bound.
	Addr     string    `json:"addr,omitempty"`
	Identity string    `json:"identity,omitempty"`
	Expires  time.Time `json:"expires,omitzero"`
	Error    *Refusal  `json:"error,omitempty"`
}

// Refusal is a login request refused, with a stable reason code.
type Refusal struct {
	Code    reason.Code `json:"code"`
	Message string      `json:"message"`
}

// maxRequestInfo bounds the Nats-Request-Info header before it is decoded.
const maxRequestInfo = 8 << 10

// ServeLogin answers login requests on LoginSubject(prefix, node) on nc
// (the node's own connection, in the nodes' account) with links for the
// bus identity that asked: the account named in the Nats-Request-Info
// header the server stamped on the request crossing the account's service
// import. A request without that header was published inside the nodes'
// account (a node or provider) and is refused, as is one from an identity
// that may not sign in. addr is the HTTP listener's bound address. The
// body is ignored: nothing the caller says decides whom the link is for.
func ServeLogin(nc *nats.Conn, prefix, node, addr string, c *Console) (*nats.Subscription, error) {
	return nc.Subscribe(LoginSubject(prefix, node), func(m *nats.Msg) {
		rep := c.answerLogin(m.Header.Get("Nats-Request-Info"), addr)
		b, err := json.Marshal(rep)
		if err != nil { // LoginReply always marshals
			return
		}
		if err := m.Respond(b); err != nil {
			c.opts.Logger.Debug("console: login answer not sent", "err", err)
		}
	})
}

func (c *Console) answerLogin(info, addr string) LoginReply {
	refuse := func(code reason.Code, msg string) LoginReply {
		return LoginReply{Error: &Refusal{Code: code, Message: msg}}
	}
	if info == "" || len(info) > maxRequestInfo {
		return refuse(reason.TenantForbidden, "the request did not come through a bus identity's own account (nodes and providers do not sign in to the console)")
	}
	var ci struct {
		Account string `json:"acc"`
	}
	if err := json.Unmarshal([]byte(info), &ci); err != nil || ci.Account == "" {
		return refuse(reason.TenantForbidden, "the request's identity header names no account")
	}
	tok, exp, err := c.IssueLogin(ci.Account)
	switch {
	case errors.Is(err, ErrForbidden):
		return refuse(reason.TenantForbidden, err.Error())
	case errors.Is(err, ErrTooMany):
		return refuse(reason.Overloaded, err.Error())
	case err != nil:
		return refuse(reason.Internal, err.Error())
	}
	c.opts.Logger.Info("console: login link issued", "identity", ci.Account, "expires", exp)
	return LoginReply{Path: LoginPath(tok), Addr: addr, Identity: ci.Account, Expires: exp}
}
