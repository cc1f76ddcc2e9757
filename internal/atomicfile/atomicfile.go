// Package atomicfile writes a file so that, even across a crash, its path
// holds either the old content or the new one, never a mix, and the new one
// survives once Write returns: a temporary file in the same directory,
// fsynced, renamed (or linked) into place, and the directory fsynced.
package atomicfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Write writes data to path with permissions perm. With replace it
// replaces an existing file; without, it fails with an error matching
// fs.ErrExist if path exists, even if it appears while writing.
func Write(path string, data []byte, perm fs.FileMode, replace bool) error {
	return WriteWith(path, perm, replace, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteWith is Write of what write writes, for content too large to hold
// in memory (a download written as it arrives). When write fails, path is
// left as it was and its error is returned.
func WriteWith(path string, perm fs.FileMode, replace bool, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	name := tmp.Name()
	defer os.Remove(name) // no-op after a successful rename
	for _, step := range []func() error{
		func() error { return tmp.Chmod(perm) },
		func() error { return write(tmp) },
		tmp.Sync,
	} {
		if err := step(); err != nil {
			tmp.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if replace {
		err = os.Rename(name, path)
	} else {
		// A hard link fails if path exists: never clobber.
		err = os.Link(name, path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory, so that a rename or a new file in it is
// durable. File systems that cannot sync a directory are not an error: the
// rename is still atomic there.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	_ = d.Sync()
	return nil
}
