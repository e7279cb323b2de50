// Package console is the node's operator console: server-rendered pages
// on the node's HTTP listener, under /console/, showing the discovery
// state of every provider, the turns open on the node with their held
// catalogues and audit trails, and the verification of a tenant's audit
// chain.
//
// # Signing in
//
// Nobody signs in with a password. A person proves a bus identity by
// connecting to NATS as it (the bus checks the identity's nkey) and
// asking the node for a login link on <prefix>.console.<node>.login
// (`node console` does this). Runtime, audit, admin and approver
// identities live in NATS accounts of their own that import that subject
// from the nodes' account; the server stamps every request crossing the
// import with the requesting account in Nats-Request-Info, overwriting
// whatever the client sent, and the account is named after the identity.
// So the identity a link is issued for is a fact the bus established,
// never a field the caller filled; nodes and providers (users of the
// nodes' account, whose requests carry no stamp) get no link.
//
// A link carries a login token: 256 random bits, valid for one use within
// LoginTTL, on the node that issued it. Following it starts a session: a
// cookie (HttpOnly, SameSite=Strict, Path=/console/, Secure when the
// request came over TLS, expiring with the session) naming a session of
// SessionTTL. The node keeps only SHA-256 digests of tokens and cookies,
// in memory: a restart signs everyone out.
//
// # What a session may see and do
//
// The session names an identity, and every request looks the identity up
// in the node's current identities: an identity removed from the policy
// is signed out at its next request, and a change of its tenants applies
// at once. An admin sees every tenant; any other identity sees the
// tenants it is bound to (identity.Identity.Tenants). Verifying a
// tenant's audit chain is for admin and audit identities. Every
// state-changing request is a POST carrying the session's CSRF token
// (a form field, compared in constant time); one without it, or from
// another origin, is refused 403 and changes nothing.
//
// Every answer carries a Content-Security-Policy that allows nothing but
// the console's own stylesheet (no script at all, no inline style, no
// framing, forms only to the console), and pages with data are not
// cached.
package console
