package main

import (
	"fmt"

	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/identity"
)

// identitiesCmd prints the bus configuration for the config's identities:
// the accounts, users and permissions the embedded server runs with, for
// an operator to put into an external cluster's nats-server.conf. Missing
// seeds are created in the credentials directory, as `node serve` does.
func identitiesCmd(args []string) error {
	fs := newFlags("identities", "[--config cluster.yaml] [--creds-dir DIR]",
		"Prints, as nats-server configuration (JSON, which nats-server reads), the accounts, users and\n"+
			"permissions of the config's bus identities (docs/security.md), creating any missing nkey seed\n"+
			"(0600) in the credentials directory. Give each party its seed file; include the output in\n"+
			"the configuration of an external NATS cluster.")
	cfgPath := fs.String("config", "cluster.yaml", "the node's configuration")
	dir := fs.String("creds-dir", "", "where the seeds are (default: node.creds_dir of --config)")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return fmt.Errorf("identities: %w", err)
	}
	if *dir == "" {
		*dir = cfg.Node.CredsDir
	}
	out, err := identity.Provision(*dir, cfg.Bus(), cfg.EffectiveIdentities())
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, out)
	fmt.Fprintf(stderr, "seeds in %s: give each party its own <name>.nk (the node: nats.credentials)\n", *dir)
	if len(cfg.Cluster.Nodes) > 0 {
		// The embedded servers' routes authenticate with it: copy it
		// with the seeds to every node's machine.
		if _, err := identity.LoadOrCreateRouteSecret(*dir); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "route secret in %s: every node of the cluster needs the same file\n", identity.RouteSecretFile(*dir))
	}
	return nil
}
