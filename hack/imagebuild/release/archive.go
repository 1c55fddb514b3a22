// Package release writes the release files that are not images: reproducible gzip tarballs (the
// kubectl plugin's archives, the packaged chart made so), the plugin's Krew manifest, and the
// checksums and listing of a release directory.
package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// File is a regular file of an archive.
type File struct {
	// Name is its path in the archive: slash-separated, relative, without "..".
	Name string
	// Source is the file on this machine whose content it gets.
	Source string
	// Mode is its permission bits, e.g. 0o755 for a program.
	Mode int64
}

// Written is a file written: its path, size and SHA-256.
type Written struct {
	Path   string
	Size   int64
	SHA256 string
}

// WriteTarGz writes files into a gzip-compressed tarball at path, reproducibly.
//
// Problem: tar and gzip record what a build machine happens to have (order of a directory, owner,
// time of day), so two builds of equal files give different bytes and checksums.
// Solution: entries sorted by name, owned by 0:0 with no user or group name, stamped mtime
// (whole seconds); no name or time in the gzip header; the default compression level.
// Invariant: equal files, names, modes and mtime give equal bytes with one Go toolchain
// (compress/flate's output is not promised across Go releases).
func WriteTarGz(path string, files []File, mtime time.Time) (Written, error) {
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	for i, f := range sorted {
		if f.Name == "" || strings.HasPrefix(f.Name, "/") || slices.Contains(strings.Split(f.Name, "/"), "..") {
			return Written{}, fmt.Errorf("write %s: entry name %q: want a relative path with no .. in it", path, f.Name)
		}
		if i > 0 && sorted[i-1].Name == f.Name {
			return Written{}, fmt.Errorf("write %s: entry %q given twice", path, f.Name)
		}
	}
	return writeAtomic(path, func(w io.Writer) error {
		zw, tw := newTarGz(w, gzip.Header{})
		for _, f := range sorted {
			if err := addFile(tw, f, mtime); err != nil {
				return err
			}
		}
		return closeTarGz(zw, tw)
	})
}

// Retime rewrites the gzip tarball at path with every entry's time set to mtime, keeping the
// entries, their order, contents and modes, and the gzip header's name, comment and extra field
// (not its time). `helm package` stamps each file with the time of packaging: retimed to the
// commit time, equal charts give equal bytes. Retiming a retimed tarball changes nothing.
func Retime(path string, mtime time.Time) (Written, error) {
	in, err := os.ReadFile(path)
	if err != nil {
		return Written{}, fmt.Errorf("retime %s: %w", path, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(in))
	if err != nil {
		return Written{}, fmt.Errorf("retime %s: %w", path, err)
	}
	header := gzip.Header{Name: zr.Name, Comment: zr.Comment, Extra: zr.Extra}
	tr := tar.NewReader(zr)
	return writeAtomic(path, func(w io.Writer) error {
		zw, tw := newTarGz(w, header)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
			h.ModTime, h.AccessTime, h.ChangeTime = mtime.UTC().Truncate(time.Second), time.Time{}, time.Time{}
			for _, k := range []string{"mtime", "atime", "ctime"} {
				delete(h.PAXRecords, k)
			}
			h.Format = tar.FormatUnknown // the writer picks the smallest format that holds the header
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if _, err := io.Copy(tw, tr); err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
		}
		return closeTarGz(zw, tw)
	})
}

func newTarGz(w io.Writer, header gzip.Header) (*gzip.Writer, *tar.Writer) {
	zw := gzip.NewWriter(w)
	zw.Header = header
	return zw, tar.NewWriter(zw)
}

func closeTarGz(zw *gzip.Writer, tw *tar.Writer) error {
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

func addFile(tw *tar.Writer, f File, mtime time.Time) error {
	src, err := os.Open(f.Source)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	info, err := src.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", f.Source)
	}
	h := &tar.Header{
		Typeflag: tar.TypeReg, Name: f.Name, Mode: f.Mode, Size: info.Size(),
		ModTime: mtime.UTC().Truncate(time.Second),
	}
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("add %s: %w", f.Name, err)
	}
	if _, err := io.Copy(tw, src); err != nil {
		return fmt.Errorf("add %s from %s: %w", f.Name, f.Source, err)
	}
	return nil
}

// writeAtomic writes path through write into a temporary file renamed over path once complete,
// and returns its size and SHA-256.
func writeAtomic(path string, write func(io.Writer) error) (Written, error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return Written{}, fmt.Errorf("write %s: %w", path, err)
	}
	h := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(f, h)}
	err = write(cw)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return Written{}, fmt.Errorf("write %s: %w", path, err)
	}
	return Written{Path: filepath.Clean(path), Size: cw.n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
