// Package fsutil holds the file-system operations several packages need
// done the same careful way.
package fsutil

import (
	"fmt"
	"os"
	"path/filepath"
)

// CreateOnce writes data to path, mode 0600, in a directory it creates
// (0700) if missing — unless path exists, when it writes nothing and
// returns an error matching fs.ErrExist. The data is written to a
// temporary file, synced and linked into place, so a process creating the
// same file at the same time (the nodes of a cluster sharing a key or a
// seed) finds either no file or the whole of one, never a part: one
// creation wins, the others get fs.ErrExist and read the winner's.
func CreateOnce(path string, data []byte) error {
	tmp, err := writeTemp(path, data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	return os.Link(tmp, path)
}

// writeTemp writes data, synced, to a new 0600 file beside path (whose
// directory it creates, 0700) and returns its name.
func writeTemp(path string, data []byte) (string, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return tmp, nil
}

// Replace writes data to path, mode 0600, in a directory it creates
// (0700) if missing, replacing whatever path held: the data is written to
// a temporary file beside it, synced, and renamed into place, so a reader
// — or a crash at any instant — sees the old content or the new, whole,
// never a part.
func Replace(path string, data []byte) error {
	tmp, err := writeTemp(path, data)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
