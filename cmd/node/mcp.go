package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sharedos/sharedos/internal/mcpfront"
)

// stdin is where `node mcp` reads the sandbox's messages (tests swap it).
var stdin io.Reader = os.Stdin

// tokenEnv is where `node mcp` finds the token when no file is named.
const tokenEnv = "SHAREDOS_MCP_TOKEN"

// mcpCmd serves one turn to a sandbox over stdio: `node mcp --token-file F`
// (or the token in $SHAREDOS_MCP_TOKEN), launched by the sandbox as its
// MCP server. Each message is forwarded to the turn's node's MCP endpoint
// (the token's audience, or --url) with the token.
func mcpCmd(args []string) error {
	fs := newFlags("mcp", "[--token-file FILE] [--url URL]",
		"Serves the turn an execution token is for (node turn token) to an MCP client on\nstdin/stdout. The token is read from --token-file, else $"+tokenEnv+"; it is\nnever taken as an argument (process lists are readable). Everything is decided\nat the node's MCP endpoint; this is only the stdio transport.")
	file := fs.String("token-file", "", "file holding the execution token")
	url := fs.String("url", "", "the MCP endpoint (default: the token's audience)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("mcp takes no arguments, got %q (a token is read from --token-file or $%s)", fs.Args(), tokenEnv)}
	}
	tok := os.Getenv(tokenEnv)
	if *file != "" {
		b, err := os.ReadFile(*file)
		if err != nil {
			return fmt.Errorf("mcp: %w", err)
		}
		tok = string(b)
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return usageError{errors.New("mcp needs an execution token: --token-file FILE or $" + tokenEnv + " (node turn token mints one)")}
	}
	if *url == "" {
		c, err := mcpfront.ReadClaims(tok)
		if err != nil {
			return fmt.Errorf("mcp: the token is not an execution token: %w", err)
		}
		*url = c.Audience
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := mcpfront.ServeStdio(ctx, stdin, stdout, mcpfront.StdioOptions{URL: *url, Token: tok})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
