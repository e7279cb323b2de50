package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/reason"
)

// An agent runtime's turn: open it for a principal, show the model the
// tools in its API's format, call what the model chose, and close. The
// runtime connects as its bus identity (the seed the node wrote, e.g.
// data/creds/runtime.nk); who it is comes from the bus, never from Access.
func Example() {
	auth, err := client.CredentialOptions("data/creds/runtime.nk")
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(os.Getenv("NATS_URL"), auth...)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()
	c := client.New(nc, nil)

	turn, err := c.Open(ctx, client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes", "text"}})
	if err != nil {
		log.Fatal(err)
	}
	defer turn.Close(ctx)

	// What the model API takes as its "tools", exactly, and what could not
	// be sent without weakening a schema.
	l, err := turn.ListFor(ctx, client.ModelQuery{Profile: "anthropic"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d tools, %d tokens, projection %s\n", len(l.Model.Tools), l.Model.Tokens, l.Model.Hash)

	// The model called a name it was shown.
	res, err := turn.InvokeAs(ctx, "anthropic", "text_stats", []byte(`{"text":"ship the kernel"}`))
	switch {
	case errors.Is(err, reason.ErrNoMatchingGrant):
		fmt.Println("refused: outside ada's grants")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println(res.Text)
	}
}
