package providerproc

import (
	"crypto/ed25519"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/sharedos/sharedos/internal/auditstore"
)

// The trusted node keys: --trust first, then the environment's file, then
// the node key in the data dir; none is an error (the command then refuses
// to start unless --insecure-unsigned).
func TestTrustedKeys(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := TrustedKeys("", "", dir); err == nil {
		t.Fatal("no keys anywhere, and no error")
	}
	key, err := auditstore.LoadOrCreateKey(auditstore.DefaultKeyFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	pub := key.Public().(ed25519.PublicKey)
	keys, from, err := TrustedKeys("", "", dir)
	if err != nil || len(keys) != 1 || !keys[0].Equal(pub) || from != auditstore.DefaultKeyFile(dir) {
		t.Fatalf("from the data dir: %v %s %v", keys, from, err)
	}
	other, _, _ := ed25519.GenerateKey(nil)
	file := filepath.Join(dir, "trusted")
	if err := os.WriteFile(file, []byte(hex.EncodeToString(other)+" node-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][2]string{{file, ""}, {"", file}} {
		keys, _, err = TrustedKeys(args[0], args[1], dir)
		if err != nil || len(keys) != 1 || !keys[0].Equal(other) {
			t.Fatalf("from %q: %v %v", args, keys, err)
		}
	}
	if _, _, err := TrustedKeys(filepath.Join(dir, "missing"), "", dir); err == nil {
		t.Fatal("a --trust file that does not exist falls back silently")
	}
}
