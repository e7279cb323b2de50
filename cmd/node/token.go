package main

import (
	"context"
	"flag"
	"os"
	"time"

	"github.com/sharedos/sharedos/client"
)

// turnTokenFlags are `turn token`'s own flags (nil pointers' values for
// other subcommands).
func turnTokenFlags(fs *flag.FlagSet, sub string) (*time.Duration, *string) {
	if sub != "token" {
		return new(time.Duration), new(string)
	}
	return fs.Duration("ttl", 0, "the token's lifetime (default: the node's, 10m; at most 1h)"),
		fs.String("out", "", "write the token to this file (mode 0600) instead of printing it")
}

// turnToken mints an execution token for the saved turn (node turn token).
func turnToken(ctx context.Context, t *client.Turn, h string, ttl time.Duration, out string, gone func(error) error) error {
	rep, err := t.Token(ctx, ttl)
	if err != nil {
		return gone(err)
	}
	res := map[string]any{"turn": h, "url": rep.URL, "token_id": rep.TokenID, "catalog_hash": rep.CatalogHash,
		"expires": time.UnixMilli(rep.ExpiresMs).UTC().Format(time.RFC3339)}
	if out != "" {
		if err := os.WriteFile(out, []byte(rep.Token+"\n"), 0o600); err != nil {
			return err
		}
		res["token_file"] = out
	} else {
		res["token"] = rep.Token
	}
	return printJSON(res)
}
