package client

import (
	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/internal/identity"
)

// CredentialOptions are the nats.Options to connect as the bus identity
// whose credentials are in file: a user nkey seed (the <name>.nk files a
// node generates in <data_dir>/creds) or a decentralized-auth .creds
// file. Pass them to nats.Connect; docs/security.md says which identity
// may do what.
func CredentialOptions(file string) ([]nats.Option, error) {
	return identity.CredentialOptions(file)
}
