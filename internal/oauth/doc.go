// Package oauth holds the OAuth 2.1 credentials of MCP-backed providers:
// discovery of a server's authorization server, the grants (client
// credentials for a service, authorization code with PKCE for a person),
// refresh, and the replicated, encrypted store the tokens live in.
//
// What holds:
//
//   - Discovery follows the MCP authorization spec: an unauthenticated
//     request to the server answers 401 with WWW-Authenticate naming its
//     protected-resource metadata (RFC 9728, with the well-known URLs as
//     fallback); the metadata's resource must be the server's; the
//     authorization server's metadata (RFC 8414, OAuth and OIDC well-known
//     paths) must name the issuer it was fetched for and offer PKCE. An
//     operator may pin the issuer: then no other is used, whatever the
//     server's metadata says, and the client secret goes to no other.
//   - Every token request names the server as its resource (RFC 8707).
//     Authorization code always uses PKCE S256 and a one-time state; the
//     authorization response's iss (RFC 9207) must be the issuer when the
//     server advertises it and, when present, must always match.
//   - Grants are stored in a JetStream key-value bucket, one key per
//     (server, tenant, profile[, principal]), sealed with AES-256-GCM under
//     a key the node holds in its credentials directory (created once,
//     mode 0600); the store key is the sealed record's additional data,
//     so a record cannot be moved to another credential. Every node of a
//     cluster shares the bucket and (like the other secrets) the key file.
//   - Refresh is serialized across nodes by the bucket's revisions: a
//     node takes a lease on the record with a compare-and-set before it
//     calls the token endpoint; a node that loses waits for the winner's
//     record and uses its token. A rotating refresh token is never sent
//     twice.
//   - A refresh refused by the authorization server (invalid_grant, a
//     revoked or expired refresh token, a client no longer accepted)
//     leaves the grant failed with its reason: ErrAuthRequired until the
//     profile is authorized again. An unreachable server is ErrUnavailable
//     and changes nothing stored.
//   - A token never appears in an error, a log line or a status: errors
//     carry the authorization server's error code and a bounded
//     description, never a response body.
package oauth
