package fsutil_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sharedos/sharedos/internal/fsutil"
)

// Many creators at once: exactly one wins, the file is whole and 0600,
// the others are told it exists, and no temporary file is left.
func TestCreateOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	path := filepath.Join(dir, "k")
	var wins sync.Map
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			data := []byte{byte('a' + i), '\n'}
			err := fsutil.CreateOnce(path, data)
			switch {
			case err == nil:
				wins.Store(i, string(data))
			case !errors.Is(err, fs.ErrExist):
				t.Errorf("creator %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	var won []string
	wins.Range(func(_, v any) bool { won = append(won, v.(string)); return true })
	got, err := os.ReadFile(path)
	if err != nil || len(won) != 1 || string(got) != won[0] {
		t.Fatalf("winners %q, file %q %v", won, got, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	if d, _ := os.Stat(dir); d.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v", d.Mode())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
}

// Replace puts the whole new content in place, 0600, over an old file,
// in a directory it makes, and leaves no temporary file behind.
func TestReplace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d", "state.json")
	for _, data := range []string{"first", "second, longer"} {
		if err := fsutil.Replace(path, []byte(data)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Fatalf("read %q, %v; want %q", got, err, data)
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 {
		t.Fatalf("the directory holds %v (%v), want the file alone", entries, err)
	}
}
