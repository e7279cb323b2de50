package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/identity"
)

// configFlag is --config: a path, and whether it was given. The default
// cluster.yaml may be missing (a client run from elsewhere uses the
// defaults); a path given explicitly must exist.
type configFlag struct {
	path string
	set  bool
}

func (c *configFlag) String() string { return c.path }
func (c *configFlag) Set(s string) error {
	c.path, c.set = s, true
	return nil
}

// load reads the config; (nil, nil) when the default file is absent.
func (c *configFlag) load() (*config.Config, error) {
	path := c.path
	if path == "" {
		path = "cluster.yaml"
	}
	cfg, err := config.Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		if c.set {
			return nil, fmt.Errorf("--config %s: no such file", path)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	return cfg, nil
}

// conn holds the flags every client command shares.
type conn struct {
	cfg                 configFlag
	url, prefix, stream string
	urlFrom             string // where url came from, for error messages
	resolved            bool
	// creds is the identity's credentials file; as is the identity
	// whose seed the node generated is used when creds is not given.
	creds, as string
	// inbox overrides the identity's inbox prefix (_INBOX_<name>).
	inbox    string
	credsDir string // from the config: where the generated seeds are
}

func (c *conn) flags(f *flag.FlagSet, withStream bool) {
	c.cfg.path = "cluster.yaml"
	f.Var(&c.cfg, "config", "configuration file to find NATS, the prefix, the audit stream and the seeds in (its relative paths are relative to its directory; a missing default is fine; a named file must exist)")
	f.StringVar(&c.url, "nats", "", "NATS URL (default: $NATS_URL, else from the config, else "+nats.DefaultURL+")")
	f.StringVar(&c.prefix, "prefix", "", "subject prefix (default: from the config, else sharedos)")
	if withStream {
		f.StringVar(&c.stream, "stream", "", "audit stream (default: from the config, else SHAREDOS_AUDIT)")
	}
	c.as = config.DefaultRuntimeIdentity
	if withStream {
		c.as = config.DefaultAuditIdentity
	}
	f.StringVar(&c.creds, "creds", "", "credentials file: a user nkey seed (.nk) or a .creds file (default: $SHAREDOS_CREDS, else the seed the node generated for --as in node.creds_dir)")
	f.StringVar(&c.as, "as", c.as, "identity whose generated seed to use when --creds is not given")
	f.StringVar(&c.inbox, "inbox-prefix", "", "inbox prefix (default: _INBOX_<name> for a seed <name>.nk, the library's for a .creds file; an audit reader must use _INBOX_<name>)")
}

// resolve fills url, prefix and stream: flag, then NATS_URL (the URL
// only), then the config, then the defaults.
func (c *conn) resolve() error {
	c.resolved = true
	c.urlFrom = "--nats"
	if c.url == "" {
		c.url, c.urlFrom = os.Getenv("NATS_URL"), "$NATS_URL"
	}
	if c.url == "" || c.prefix == "" || c.stream == "" || c.cfg.set {
		cfg, err := c.cfg.load()
		if err != nil {
			return err
		}
		if cfg != nil {
			if c.url == "" {
				c.urlFrom = c.cfg.path
				switch {
				case len(cfg.NATS.URLs) > 0:
					c.url = strings.Join(cfg.NATS.URLs, ",")
				case len(cfg.Cluster.Nodes) > 0: // any node of the cluster
					var urls []string
					for _, n := range cfg.Cluster.Nodes {
						urls = append(urls, fmt.Sprintf("nats://%s", net.JoinHostPort(n.Host, strconv.Itoa(n.Port))))
					}
					c.url = strings.Join(urls, ",")
				default:
					c.url = fmt.Sprintf("nats://%s:%d", cfg.NATS.Embedded.Host, cfg.NATS.Embedded.Port)
				}
			}
			if c.prefix == "" {
				c.prefix = cfg.NATS.Prefix
			}
			if c.stream == "" {
				c.stream = cfg.Audit.Stream
			}
			c.credsDir = cfg.Node.CredsDir
		}
	}
	if c.url == "" {
		c.url, c.urlFrom = nats.DefaultURL, "the default"
	}
	if c.prefix == "" {
		c.prefix = "sharedos"
	}
	if c.stream == "" {
		c.stream = "SHAREDOS_AUDIT"
	}
	return nil
}

// dial connects to the node's NATS.
func (c *conn) dial() (*nats.Conn, error) {
	if !c.resolved {
		if err := c.resolve(); err != nil {
			return nil, err
		}
	}
	opts := []nats.Option{nats.Name("sharedos-cli")}
	auth, who, err := c.auth()
	if err != nil {
		return nil, err
	}
	opts = append(opts, auth...)
	if c.inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.inbox)) // after auth's: it wins
		who += ", inbox prefix " + c.inbox
	}
	nc, err := nats.Connect(c.url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s (from %s; is `node serve` running?) %s: %w", c.url, c.urlFrom, who, err)
	}
	return nc, nil
}

// auth are the options to authenticate with: --creds, else
// $SHAREDOS_CREDS, else the seed the node generated for --as in its
// credentials directory (the config's node.creds_dir, else ./data/creds),
// if it is there; else none (a bus without authentication). who says, for
// an error, which identity and which file that is.
func (c *conn) auth() (opts []nats.Option, who string, err error) {
	file, from := c.creds, "--creds"
	if file == "" {
		file, from = os.Getenv("SHAREDOS_CREDS"), "$SHAREDOS_CREDS"
	}
	if file != "" {
		if opts, err = identity.CredentialOptions(file); err != nil {
			return nil, "", fmt.Errorf("credentials (%s): %w", from, err)
		}
		if strings.HasSuffix(file, ".creds") {
			return opts, fmt.Sprintf("with the credentials file %s (%s)", file, from), nil
		}
		return opts, fmt.Sprintf("as identity %s with the seed %s (%s)", identity.NameOfSeedFile(file), file, from), nil
	}
	dir, dirFrom := c.credsDir, "node.creds_dir of "+c.cfg.path
	if dir == "" {
		dir, dirFrom = identity.DefaultDir("./data"), "no config read"
	}
	seed := identity.SeedFile(dir, c.as)
	if _, serr := os.Stat(seed); serr != nil {
		return nil, fmt.Sprintf("without credentials: identity %s has no seed at %s (%s; pass the node's --config, --as NAME or --creds FILE)", c.as, seed, dirFrom), nil
	}
	if opts, err = identity.CredentialOptions(seed); err != nil {
		return nil, "", fmt.Errorf("credentials (the node's generated seed for %s): %w", c.as, err)
	}
	return opts, fmt.Sprintf("as identity %s with the seed %s (%s)", c.as, seed, dirFrom), nil
}
