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

// writer streams a new file to S3.
//
// Problem: a file must appear in the bucket atomically and only when it is closed, but staging it
// whole in memory or on disk does not scale to large files.
// Solution: writes fill a WritePartSize buffer; each full buffer is uploaded as a multipart part
// in the background (up to maxPartsInFlight at once, each holding a budget reservation) and close
// completes the upload. A file smaller than one part is a single PutObject.
// Invariant: the object becomes visible only at CompleteMultipartUpload/PutObject; on failure the
// upload is aborted and the file is gone. An error is sticky: once an upload request failed, every
// later write, fsync and close of the file returns it, and nothing more is uploaded.
type writer struct {
	fsys   *filesystem
	node   *fileNode
	parent *dirNode
	name   string

	mu       sync.Mutex
	off      int64
	modTime  time.Time
	buf      []byte // reserved from the budget when non-nil
	uploadID string
	partNum  int32
	inflight sync.WaitGroup
	slots    chan struct{}
	done     bool
	// empty is the object stored by a close while nothing was written (see flush); nil until then.
	empty *entry
	// resMu guards the results of background part uploads; it is never held while waiting.
	resMu  sync.Mutex
	parts  []types.CompletedPart
	err    error // first upload error; sticky
	result syscall.Errno
}

func newWriter(fsys *filesystem, node *fileNode, parent *dirNode, name string) *writer {
	return &writer{
		fsys: fsys, node: node, parent: parent, name: name, modTime: time.Now(),
		slots: make(chan struct{}, maxPartsInFlight),
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
	switch {
	case w.done:
		return 0, syscall.EBADF
	case off != w.off:
		return 0, syscall.EINVAL
	}
	if err := w.uploadErr(); err != nil {
		return 0, toErrno(err)
	}
	written := 0
	for written < len(data) {
		if w.buf == nil {
			if err := w.fsys.budget.acquire(ctx, w.fsys.writePart); err != nil {
				if written > 0 {
					// A short write: the caller retries the rest, at the offset reached.
					return uint32(written), 0 //nolint:gosec // bounded by MaxWrite
				}
				return 0, syscall.EINTR
			}
			w.buf = w.fsys.getWriteBuf()
		}
		n := min(len(data)-written, cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, data[written:written+n]...)
		written += n
		w.off += int64(n)
		if len(w.buf) == cap(w.buf) {
			if err := w.uploadPart(); err != nil { //nolint:contextcheck // the write's interrupt must not fail a part it already took
				w.setErr(err)
				return uint32(written), toErrno(err) //nolint:gosec // bounded by MaxWrite
			}
		}
	}
	w.modTime = time.Now()
	return uint32(written), 0 //nolint:gosec // bounded by MaxWrite
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
		w.fsys.log.Error(err, "Upload failed", "key", w.node.key)
		w.abort() //nolint:contextcheck // aborting must not depend on the closing request
	}
	if w.buf != nil {
		w.fsys.putWriteBuf(w.buf)
		w.fsys.budget.release(w.fsys.writePart)
		w.buf = nil
	}
	w.result = toErrno(err)
	w.node.finishWrite(w, e, err == nil)
	return w.result
}

func (w *writer) finish(ctx context.Context) (entry, error) {
	if err := w.uploadErr(); err != nil {
		return entry{}, err
	}
	switch {
	case w.uploadID == "" && w.off == 0 && w.empty != nil:
		return *w.empty, nil
	case w.uploadID == "":
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

// flush answers the close of one of the file's descriptors: a file with data is completed, so
// the object is in the bucket when close returns; an empty file is stored empty but stays open
// for writing.
//
// Problem: the kernel tells the filesystem of every close(2) (flush) but not which one is the
// last; the release that follows the last is sent after close has returned, so an error there
// reaches no one. Completing an empty file at its first close would break `cmd > f` (the shell
// opens f, duplicates it onto stdout, closes the original, and cmd writes afterwards), and
// leaving it to release made a failed `touch f` look successful.
// Solution: a close of an empty file stores the empty object and returns that request's result;
// bytes written afterwards through another descriptor replace it when that one is closed.
// Invariant: a close returns 0 only if the bucket holds every byte written to the file so far;
// after a failure every close fails.
func (w *writer) flush(ctx context.Context) syscall.Errno {
	ctx = context.WithoutCancel(ctx) // as in complete: a close is not retried
	w.mu.Lock()
	if w.done || w.off > 0 {
		w.mu.Unlock()
		return w.complete(ctx)
	}
	defer w.mu.Unlock()
	if err := w.uploadErr(); err != nil {
		return toErrno(err)
	}
	if w.empty != nil {
		return 0
	}
	e, err := w.put(ctx)
	if err != nil {
		w.fsys.log.Error(err, "Upload failed", "key", w.node.key)
		w.setErr(err)
		return toErrno(err)
	}
	w.empty = &e
	return 0
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
