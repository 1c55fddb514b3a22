// Package fusetest is a small real FUSE filesystem for tests of the mount path, served on the
// FUSE connection the node-agent passes through the handshake; cmd/fusetest-mounter serves it as
// a Mountpoint Pod's mounter for the node-agent's tests. It shows a fixed file, the
// bucket name, the mount-s3 arguments received, and the content of the credentials file the request names, read afresh on every
// open, so tests can see a credential rotation through the mount. It stands in for the S3
// filesystem engine: tests build their engine with NewEngine, the one place to swap.
package fusetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/testenv/testfs"

	"github.com/s3csi/s3csi/services/mounter/internal/mounter"
)

// Names and content of the files the filesystem shows (see package testfs).
const (
	HelloName    = testfs.HelloName
	BucketName   = testfs.BucketName
	ProfileName  = testfs.ProfileName
	ArgsName     = testfs.ArgsName
	HelloContent = testfs.HelloContent
	FailBucket   = testfs.FailBucket
)

// NewEngine returns the engine tests mount with; commDir resolves the request's file names.
func NewEngine(commDir string) mounter.Engine {
	return &Engine{CommDir: commDir}
}

// Engine serves the test filesystem.
type Engine struct {
	CommDir string
}

// Mount implements mounter.Engine.
func (e *Engine) Mount(_ context.Context, fd int, state *os.File, req *handshake.Request) (mounter.Mounted, error) {
	if state != nil {
		_ = state.Close() // this filesystem keeps no state to resume from
	}
	switch {
	case req.Bucket == FailBucket:
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("bucket %q does not exist", req.Bucket)
	case req.Resume:
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("the test filesystem cannot take over a connection")
	}
	credPath := ""
	if req.CredentialsFile != "" {
		credPath = filepath.Join(e.CommDir, req.CredentialsFile)
	}
	root := &fs.Inode{}
	opts := &fs.Options{
		OnAdd: func(ctx context.Context) {
			add := func(name string, n fs.InodeEmbedder) {
				root.AddChild(name, root.NewPersistentInode(ctx, n, fs.StableAttr{}), false)
			}
			add(HelloName, &fs.MemRegularFile{Data: []byte(HelloContent), Attr: fuse.Attr{Mode: 0o444}})
			add(BucketName, &fs.MemRegularFile{Data: []byte(req.Bucket), Attr: fuse.Attr{Mode: 0o444}})
			add(ProfileName, &fileFromDisk{path: credPath})
			add(ArgsName, &fs.MemRegularFile{Data: []byte(strings.Join(req.Args, "\n")), Attr: fuse.Attr{Mode: 0o444}})
		},
	}
	opts.AllowOther = true
	opts.MaxWrite = int(req.GetMaxRead())
	server, err := fuse.NewServer(fs.NewNodeFS(root, opts), fmt.Sprintf("/dev/fd/%d", fd), &opts.MountOptions)
	if err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("start FUSE server: %w", err)
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		return nil, fmt.Errorf("wait for FUSE init: %w", err)
	}
	return mounted{server}, nil
}

type mounted struct{ s *fuse.Server }

func (m mounted) Wait() error {
	m.s.Wait()
	return nil
}

// fileFromDisk shows the current content of a file on the node.
type fileFromDisk struct {
	fs.Inode
	path string
}

var (
	_ fs.NodeOpener    = (*fileFromDisk)(nil)
	_ fs.NodeGetattrer = (*fileFromDisk)(nil)
)

func (f *fileFromDisk) Open(context.Context, uint32) (fs.FileHandle, uint32, syscall.Errno) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return nil, 0, syscall.ENOENT
	}
	return bytesHandle(data), fuse.FOPEN_DIRECT_IO, 0
}

func (f *fileFromDisk) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = 0o444
	return 0
}

// bytesHandle is an open file's snapshot of its content.
type bytesHandle []byte

var _ fs.FileReader = bytesHandle(nil)

func (b bytesHandle) Read(_ context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= int64(len(b)) {
		return fuse.ReadResultData(nil), 0
	}
	end := min(int(off)+len(dest), len(b))
	return fuse.ReadResultData(b[off:end]), 0
}
