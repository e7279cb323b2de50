package main

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/internal/auditstore"
)

// node audit keys --local reads the key file the config names
// (audit.key_file, relative to the config's directory), and what it prints
// is a --trust file: the documented format, read back to the same key.
func TestLocalKeysAreATrustFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(t.TempDir()) // elsewhere
	key, err := auditstore.LoadOrCreateKey(filepath.Join(dir, "keys", "signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cfg, []byte("node: {id: node-7}\naudit: {key_file: keys/signing.key}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "audit", "keys", "--local", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	pub := key.Public().(ed25519.PublicKey)
	var doc struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"node": "node-7", "key_id": audit.KeyID(pub), "public_key": hex.EncodeToString(pub),
		"source": "local", "file": filepath.Join(dir, "keys", "signing.key")}
	if len(doc.Keys) != 1 || len(doc.Keys[0]) != len(want) {
		t.Fatalf("keys --local printed %s; want one key with exactly %v", out, want)
	}
	for k, v := range want {
		if doc.Keys[0][k] != v {
			t.Errorf("keys[0].%s = %v, want %v", k, doc.Keys[0][k], v)
		}
	}
	keys, err := audit.ParsePublicKeys([]byte(out))
	if err != nil || len(keys) != 1 || !keys[0].Equal(pub) {
		t.Fatalf("the output read as a --trust file: %v %v", keys, err)
	}
	// What the stream's checkpoints claim is refused as a trust file.
	stream := strings.Replace(out, `"source": "local"`, `"source": "stream"`, 1)
	if _, err := audit.ParsePublicKeys([]byte(stream)); err == nil || !strings.Contains(err.Error(), "--local") {
		t.Errorf("a stream key as a trust file: %v", err)
	}
}
