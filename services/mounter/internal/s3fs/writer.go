package s3fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"
)

// maxPartsInFlight bounds the concurrent part uploads of one file.
const maxPartsInFlight = 8

// firstWriteBuffer is the buffer a file starts with; it grows fourfold up to a part.
const firstWriteBuffer = 64 << 10

// writer streams a new file, or a new version of an object, to S3.
//
// Problem: a file must appear in the bucket atomically, whole, and only when its writer is done,
// but staging it whole in memory or on disk does not scale to large files; and a program may hold
// many files open for writing at once (awk with one output per key), more than the memory budget
// has parts for.
// Solution: writes fill a buffer that starts at firstWriteBuffer and grows fourfold up to
// WritePartSize, each step reserved from the budget; each full part is uploaded as a multipart
// part in the background (up to maxPartsInFlight at once, each holding its reservation) and the
// opener's close completes the upload (closer.go). A file smaller than one part is a single
// PutObject. A reservation that the budget cannot give within the request timeout fails the
// file with ENOMEM instead of waiting for memory that only other open files hold.
// Invariant: the object changes only at CompleteMultipartUpload/PutObject, and only if every
// write succeeded. Any failure (an upload request, a write that is not at the end of the file,
// a truncation to another size, no memory) is sticky: every later write, fsync and close
// returns it, the upload is aborted, and the bucket keeps what it held before (no object for a
// new file, the previous version for an overwrite).
//
// States, with the event that leaves each:
//
//	writing    --write at the end-->            writing
//	writing    --write elsewhere, truncate,
//	             no memory, a part fails-->      failed (sticky error; writes refused)
//	writing    --opener's close with data,
//	             fsync, release-->               completing (no more writes: EBADF)
//	writing    --another process's close,
//	             the opener's close of an
//	             empty file-->                   writing
//	failed     --opener's close, fsync,
//	             release-->                      done (upload aborted; the error returned)
//	completing --upload completed or failed-->   done (result kept; every later close returns it)
type writer struct {
	fsys   *filesystem
	node   *fileNode
	parent *dirNode
	name   string

	mu       sync.Mutex
	off      int64
	modTime  time.Time
	buf      []byte // its capacity is reserved from the budget
	uploadID string
	partNum  int32
	inflight sync.WaitGroup
	slots    chan struct{}
	done     bool
	// ended is closed once the writer is done and the node no longer names it.
	ended chan struct{}
	// resMu guards the results of background part uploads and the sticky error; it is never
	// held while waiting.
	resMu  sync.Mutex
	parts  []types.CompletedPart
	err    error // the first failure; sticky
	result syscall.Errno
}

func newWriter(fsys *filesystem, node *fileNode, parent *dirNode, name string) *writer {
	return &writer{
		fsys: fsys, node: node, parent: parent, name: name, modTime: time.Now(),
		slots: make(chan struct{}, maxPartsInFlight), ended: make(chan struct{}),
	}
}

func (w *writer) written() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.off
}

func (w *writer) mtime() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.modTime
}

func (w *writer) setMtime(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.modTime = t
}

// write appends data at off, which must be the current end of the file.
func (w *writer) write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return 0, syscall.EBADF
	}
	if err := w.uploadErr(); err != nil {
		return 0, toErrno(err)
	}
	if off != w.off {
		return 0, w.fail(fmt.Errorf("write at offset %d of %s, whose end is at %d: a file is written from start to end: %w",
			off, w.node.key, w.off, syscall.EINVAL))
	}
	written := 0
	for written < len(data) {
		if len(w.buf) == cap(w.buf) {
			if errno := w.grow(ctx); errno != 0 {
				if errno == syscall.EINTR && written > 0 {
					// A short write: the caller retries the rest, at the offset reached.
					return uint32(written), 0 //nolint:gosec // bounded by MaxWrite
				}
				return 0, errno
			}
		}
		n := min(len(data)-written, cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, data[written:written+n]...)
		written += n
		w.off += int64(n)
		if int64(len(w.buf)) == w.fsys.writePart {
			if err := w.uploadPart(); err != nil { //nolint:contextcheck // the write's interrupt must not fail a part it already took
				return 0, w.fail(err)
			}
		}
	}
	w.modTime = time.Now()
	return uint32(written), 0 //nolint:gosec // bounded by MaxWrite
}

// grow makes room in the full (or absent) buffer: the first part's buffer grows fourfold from
// firstWriteBuffer, later parts take a whole part at once. Called with w.mu held.
func (w *writer) grow(ctx context.Context) syscall.Errno {
	part := w.fsys.writePart
	old := int64(cap(w.buf))
	size := part
	if w.partNum == 0 {
		size = min(max(firstWriteBuffer, 4*old), part)
	}
	if err := w.fsys.budget.acquireWithin(ctx, size-old, w.fsys.timeout); err != nil {
		if errors.Is(err, errInterrupted) {
			return syscall.EINTR
		}
		return w.fail(fmt.Errorf("write %s: %w", w.node.key, err))
	}
	var buf []byte
	if size == part {
		buf = w.fsys.getWriteBuf()
	} else {
		buf = make([]byte, 0, size)
	}
	w.buf = append(buf, w.buf...)
	return 0
}

// releaseWait is how long an open waits for the release of a file whose last descriptor was
// closed: the kernel sends RELEASE after close(2) has returned, so a program that reopens the
// file at once could otherwise find it still being written.
const releaseWait = 100 * time.Millisecond

// settle waits for a writer that is ending and reports whether it ended: it waits releaseWait
// for the completion to start, then for the completion (bounded by the request timeout).
func (w *writer) settle() bool {
	select {
	case <-w.ended:
		return true
	case <-time.After(releaseWait):
	}
	w.mu.Lock()
	completing := w.done
	w.mu.Unlock()
	if !completing {
		return false
	}
	<-w.ended
	return true
}

// fail makes err the file's sticky error (the first one stays) and returns its errno.
func (w *writer) fail(err error) syscall.Errno {
	w.setErr(err)
	return toErrno(w.uploadErr())
}

// uploadPart sends the full buffer as the next part in the background. Called with w.mu held.
//
// Problem: the write that filled the buffer has already taken its bytes (the offset moved on);
// a signal reaching the writing thread turns into a FUSE interrupt, and failing the part for it
// would fail the whole file with EINTR, an error that applications retry forever.
// Solution: starting the upload and waiting for a free slot ignore interrupts; both are bounded:
// a request by the request timeout, a slot by the parts in flight, each bounded by that timeout.
func (w *writer) uploadPart() error {
	if w.uploadID == "" {
		rctx, cancel := w.fsys.background()
		out, err := w.fsys.client.CreateMultipartUpload(rctx, w.createInput())
		cancel()
		if err != nil {
			return fmt.Errorf("create multipart upload of %s: %w", w.node.key, err)
		}
		w.uploadID = aws.ToString(out.UploadId)
	}
	w.partNum++
	num, buf := w.partNum, w.buf
	w.buf = nil
	w.slots <- struct{}{}
	w.inflight.Add(1)
	go func() { //nolint:contextcheck // the part upload outlives the write request
		defer w.inflight.Done()
		done, err := w.sendPart(num, buf)
		w.fsys.putWriteBuf(buf)
		w.fsys.budget.release(w.fsys.writePart)
		<-w.slots
		if err != nil {
			w.setErr(err)
			return
		}
		w.resMu.Lock()
		defer w.resMu.Unlock()
		w.parts = append(w.parts, done)
	}()
	return nil
}

func (w *writer) setErr(err error) {
	w.resMu.Lock()
	defer w.resMu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

func (w *writer) uploadErr() error {
	w.resMu.Lock()
	defer w.resMu.Unlock()
	return w.err
}

func (w *writer) sendPart(num int32, buf []byte) (types.CompletedPart, error) {
	rctx, cancel := w.fsys.background()
	defer cancel()
	out, err := w.fsys.client.UploadPart(rctx, &s3.UploadPartInput{
		Bucket:            aws.String(w.fsys.bucket),
		Key:               aws.String(w.node.key),
		UploadId:          aws.String(w.uploadID),
		PartNumber:        aws.Int32(num),
		Body:              bytes.NewReader(buf),
		ContentLength:     aws.Int64(int64(len(buf))),
		ChecksumAlgorithm: w.checksum(),
	}, w.payloadSigning()...)
	if err != nil {
		return types.CompletedPart{}, fmt.Errorf("upload part %d of %s: %w", num, w.node.key, w.fsys.sendError(w.fsys.ctx, err))
	}
	return types.CompletedPart{PartNumber: aws.Int32(num), ETag: out.ETag, ChecksumCRC32C: out.ChecksumCRC32C}, nil
}

func (w *writer) createInput() *s3.CreateMultipartUploadInput {
	in := &s3.CreateMultipartUploadInput{Bucket: aws.String(w.fsys.bucket), Key: aws.String(w.node.key)}
	o := &w.fsys.opts
	if o.StorageClass != "" {
		in.StorageClass = types.StorageClass(o.StorageClass)
	}
	if o.SSE != "" {
		in.ServerSideEncryption = types.ServerSideEncryption(o.SSE)
	}
	if o.SSEKMSKeyID != "" {
		in.SSEKMSKeyId = aws.String(o.SSEKMSKeyID)
	}
	in.ChecksumAlgorithm = w.checksum()
	return in
}

// checksum is the additional checksum sent with uploads: CRC32C unless --upload-checksums=off.
func (w *writer) checksum() types.ChecksumAlgorithm {
	if w.fsys.opts.UploadChecksums == "off" {
		return ""
	}
	return types.ChecksumAlgorithmCrc32c
}

// payloadSigning are the options of an upload request's signature.
//
// Problem: SigV4 over plain HTTP signs a SHA-256 of the whole body, which costs more CPU than
// everything else an upload does (a third of the mounter's time while writing, measured).
// Solution: with the CRC32C checksum, whose header is signed and which the server checks
// against the body, the payload is sent unsigned (UNSIGNED-PAYLOAD), as mount-s3 sends its
// uploads; over HTTPS, TLS protects the body as well.
// Invariant: a body is always covered by a signed SHA-256 or by a signed CRC32C: with
// --upload-checksums=off the payload stays signed.
func (w *writer) payloadSigning() []func(*s3.Options) {
	if w.checksum() == "" {
		return nil
	}
	return []func(*s3.Options){func(o *s3.Options) { o.APIOptions = append(o.APIOptions, addUnsignedPayload) }}
}

// unsignedPayload is SigV4's x-amz-content-sha256 value for a body the signature does not cover.
const unsignedPayload = "UNSIGNED-PAYLOAD"

// addUnsignedPayload marks the request's payload unsigned before the checksum middleware runs:
// that middleware computes the body's SHA-256 along with its checksum unless a payload hash is
// already set, and the signer then uses the value set here.
func addUnsignedPayload(stack *middleware.Stack) error {
	return stack.Build.Add(middleware.BuildMiddlewareFunc("s3csiUnsignedPayload",
		func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
			return next.HandleBuild(v4.SetPayloadHash(ctx, unsignedPayload), in)
		}), middleware.After)
}

// complete finishes the upload once; later calls return the first result.
//
// Problem: the kernel turns any signal reaching a process blocked in close(2) into a FUSE
// interrupt, and Go programs receive preemption signals (SIGURG) all the time; canceling the
// upload then fails close with EINTR and loses the file, and close cannot be retried.
// Solution: completion ignores interrupts; it is bounded by the request timeout and the mount.
func (w *writer) complete(ctx context.Context) syscall.Errno {
	ctx = context.WithoutCancel(ctx)
	w.mu.Lock()
	if w.done {
		// Completing, or done: the result is known once the writer has ended.
		w.mu.Unlock()
		<-w.ended
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.result
	}
	w.done = true
	w.mu.Unlock()
	// No writes run now (done is set); wait for the parts in flight without holding the lock.
	w.inflight.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	e, err := w.finish(ctx)
	if err != nil {
		w.fsys.log.Error(err, "File not stored: the bucket keeps what it held before", "key", w.node.key)
		w.abort() //nolint:contextcheck // aborting must not depend on the closing request
	}
	w.freeBuf()
	w.result = toErrno(err)
	w.node.finishWrite(w, e, err == nil)
	close(w.ended)
	return w.result
}

func (w *writer) finish(ctx context.Context) (entry, error) {
	if err := w.uploadErr(); err != nil {
		return entry{}, err
	}
	if w.uploadID == "" {
		return w.put(ctx)
	}
	rctx, cancel := w.fsys.requestContext(ctx)
	defer cancel()
	c := w.fsys.client
	if len(w.buf) > 0 {
		w.partNum++
		done, err := w.sendPart(w.partNum, w.buf) //nolint:contextcheck // bounded by the request timeout
		if err != nil {
			return entry{}, err
		}
		w.parts = append(w.parts, done)
	}
	slices.SortFunc(w.parts, func(a, b types.CompletedPart) int { return int(*a.PartNumber - *b.PartNumber) })
	out, err := c.CompleteMultipartUpload(rctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(w.fsys.bucket), Key: aws.String(w.node.key), UploadId: aws.String(w.uploadID),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: w.parts},
	})
	if err != nil {
		return entry{}, fmt.Errorf("complete upload of %s: %w", w.node.key, err)
	}
	return entry{size: w.off, mtime: time.Now(), etag: aws.ToString(out.ETag)}, nil
}

// put stores the buffered bytes, the whole file, with one PutObject. Called with w.mu held.
func (w *writer) put(ctx context.Context) (entry, error) {
	rctx, cancel := w.fsys.requestContext(ctx)
	defer cancel()
	create := w.createInput()
	out, err := w.fsys.client.PutObject(rctx, &s3.PutObjectInput{
		Bucket: create.Bucket, Key: create.Key, Body: bytes.NewReader(w.buf),
		ContentLength: aws.Int64(int64(len(w.buf))), StorageClass: create.StorageClass,
		ServerSideEncryption: create.ServerSideEncryption, SSEKMSKeyId: create.SSEKMSKeyId,
		ChecksumAlgorithm: w.checksum(),
	}, w.payloadSigning()...)
	if err != nil {
		return entry{}, fmt.Errorf("put %s: %w", w.node.key, w.fsys.sendError(ctx, err))
	}
	return entry{size: w.off, mtime: time.Now(), etag: aws.ToString(out.ETag)}, nil
}

// flush answers the close of one of the file's descriptors. The opener's close (closer.go) of a
// file with data completes it, so the object is in the bucket when that close returns; any
// other close, and the opener's close of a file still empty, only report an earlier failure.
//
// Problem: a shell opens the file of a redirection, duplicates it onto stdout and closes the
// original before the command writes: completing an empty file at that close would end the file
// before its first byte; and a child that inherited the descriptor closes it when it exits.
// Solution: an empty file is completed by fsync or by the release after the last close; a file
// with data by the opener's close, fsync or release.
// Invariant: a close returns 0 only if nothing failed so far; the opener's close of a file with
// data returns 0 only if the bucket holds every byte written.
func (w *writer) flush(ctx context.Context, opener bool) syscall.Errno {
	w.mu.Lock()
	if opener && (w.done || w.off > 0) {
		w.mu.Unlock()
		return w.complete(ctx)
	}
	w.mu.Unlock()
	return toErrno(w.uploadErr())
}

// freeBuf returns the buffer and its reservation. Called with w.mu held.
func (w *writer) freeBuf() {
	if w.buf == nil {
		return
	}
	if int64(cap(w.buf)) == w.fsys.writePart {
		w.fsys.putWriteBuf(w.buf)
	}
	w.fsys.budget.release(int64(cap(w.buf)))
	w.buf = nil
}

func (w *writer) abort() {
	if w.uploadID == "" {
		return
	}
	ctx, cancel := w.fsys.background()
	defer cancel()
	_, err := w.fsys.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket: aws.String(w.fsys.bucket), Key: aws.String(w.node.key), UploadId: aws.String(w.uploadID),
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		w.fsys.log.Error(err, "Abort upload failed", "key", w.node.key)
	}
}
