package csiserver_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/shared/csiserver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// echoing is a CSI plugin whose handlers fail quoting the request's secrets, the worst a
// careless handler could do.
type echoing struct {
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer
}

func (echoing) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	return nil, fmt.Errorf("create bucket with key %s: access denied", req.GetSecrets()["secret_access_key"])
}

func (echoing) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	return nil, status.Errorf(codes.InvalidArgument, "secret %q is malformed", req.GetSecrets()["secret_access_key"])
}

type recorded struct {
	method string
	code   codes.Code
}

type recorder struct {
	mu   sync.Mutex
	rpcs []recorded
}

func (r *recorder) ObserveRPC(method string, code codes.Code, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rpcs = append(r.rpcs, recorded{method, code})
}

type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(_, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, args)
}

func (l *logLines) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// shortDir is a temp dir short enough for a socket path (at most 107 bytes).
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "csisrv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// start runs s until the test ends and waits for it to listen.
func start(t *testing.T, s *csiserver.Server) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	select {
	case <-s.Listening():
	case err := <-done:
		cancel()
		t.Fatalf("Start() = %v before listening", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("the server did not listen within 10s")
	}
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				err = errors.New("the server did not stop within 10s")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestNoSecretReachesTheLogOrTheReturnedError(t *testing.T) {
	const secret = "TOPSECRETVALUE"
	logs := &logLines{}
	rec := &recorder{}
	s := csiserver.New(csiserver.Config{
		Endpoint: "unix://" + filepath.Join(shortDir(t), "csi.sock"), Name: "CSI", Recorder: rec,
		Log: funcr.New(logs.add, funcr.Options{Verbosity: 4}),
		Register: func(g *grpc.Server) {
			csi.RegisterControllerServer(g, echoing{})
			csi.RegisterNodeServer(g, echoing{})
		},
	})
	stop := start(t, s)
	conn, err := grpc.NewClient("unix://"+s.Path(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()

	tests := []struct {
		name     string
		call     func(context.Context) error
		wantCode codes.Code
	}{
		{
			name: "a CreateVolume that fails quoting its secret in a plain error",
			call: func(ctx context.Context) error {
				_, err := csi.NewControllerClient(conn).CreateVolume(ctx, &csi.CreateVolumeRequest{
					Name: "pvc-logged", Secrets: map[string]string{"access_key_id": "AKID", "secret_access_key": secret},
				})
				return err
			},
			wantCode: codes.Unknown,
		},
		{
			name: "a NodePublishVolume that fails quoting its secret in a status error",
			call: func(ctx context.Context) error {
				_, err := csi.NewNodeClient(conn).NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
					VolumeId: "vol-logged", TargetPath: "/target",
					Secrets: map[string]string{"secret_access_key": secret},
				})
				return err
			},
			wantCode: codes.InvalidArgument,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(t.Context())
			if status.Code(err) != tt.wantCode {
				t.Fatalf("call = %v, want code %v", err, tt.wantCode)
			}
			msg := status.Convert(err).Message()
			if strings.Contains(msg, secret) || !strings.Contains(msg, csiserver.Redacted) {
				t.Errorf("returned error %q, want the secret replaced by %q", msg, csiserver.Redacted)
			}
		})
	}
	if err := stop(); err != nil {
		t.Fatalf("Start() after cancel = %v", err)
	}
	all := logs.all()
	if strings.Contains(all, secret) {
		t.Errorf("a secret reached the log:\n%s", all)
	}
	for _, want := range []string{"pvc-logged", "vol-logged", "RPC failed", csiserver.Redacted} {
		if !strings.Contains(all, want) {
			t.Errorf("the log lacks %q:\n%s", want, all)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []recorded{{csi.Controller_CreateVolume_FullMethodName, codes.Unknown}, {csi.Node_NodePublishVolume_FullMethodName, codes.InvalidArgument}}
	if fmt.Sprint(rec.rpcs) != fmt.Sprint(want) {
		t.Errorf("recorded %v, want %v", rec.rpcs, want)
	}
}

func TestServerOwnsItsSocketFromStartToStop(t *testing.T) {
	dir := shortDir(t)
	socket := filepath.Join(dir, "nested", "csi.sock")
	s := csiserver.New(csiserver.Config{Endpoint: "unix://" + socket, Name: "CSI", Log: testr.New(t)})
	if err := s.Ready(t.Context()); err == nil {
		t.Error("Ready() before Start = nil, want an error")
	}
	stop := start(t, s)
	fi, err := os.Stat(socket)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o660 {
		t.Errorf("socket mode = %o, want 660", perm)
	}
	if err := s.Ready(t.Context()); err != nil {
		t.Errorf("Ready() while serving = %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Start() after cancel = %v", err)
	}
	if err := s.Ready(t.Context()); err == nil {
		t.Error("Ready() after stop = nil, want an error")
	}
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Errorf("the socket outlived the server: %v", err)
	}
}

func TestServerReplacesOnlyAStaleSocket(t *testing.T) {
	dir := shortDir(t)
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	// As after a crash: the process died without removing its socket.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = l.Close()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		endpoint string
		wantErr  string
	}{
		{name: "a socket a dead process left is replaced", endpoint: "unix://" + stale},
		{name: "a bare path is accepted", endpoint: filepath.Join(dir, "bare.sock")},
		{name: "a regular file is never removed", endpoint: "unix://" + file, wantErr: "not a socket"},
		{name: "a relative path is refused", endpoint: "unix://csi.sock", wantErr: "not unix:///absolute/path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := csiserver.New(csiserver.Config{Endpoint: tt.endpoint, Log: logr.Discard()})
			if tt.wantErr == "" {
				if err := start(t, s)(); err != nil {
					t.Errorf("Start() = %v", err)
				}
				return
			}
			if err := s.Start(t.Context()); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Start() = %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("the regular file is gone: %v", err)
	}
}

// waiting is a CSI node plugin whose NodePublishVolume waits for something that never comes
// and, when its context ends, says what it waited for.
type waiting struct{ csi.UnimplementedNodeServer }

func (waiting) NodePublishVolume(ctx context.Context, _ *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	<-ctx.Done()
	return nil, status.Error(codes.DeadlineExceeded, "Mountpoint Pod mount-s3/mp-1 is not running; see kubectl describe pod")
}

// A handler that waits until its deadline answers before the caller's deadline, so the caller
// (kubelet, which shows it in the pod's Events) gets the handler's explanation rather than its
// own bare "context deadline exceeded".
func TestAWaitThatTimesOutReachesTheCallerWithItsReason(t *testing.T) {
	s := csiserver.New(csiserver.Config{
		Endpoint: "unix://" + filepath.Join(shortDir(t), "csi.sock"), Name: "CSI",
		Log:      testr.New(t),
		Register: func(g *grpc.Server) { csi.RegisterNodeServer(g, waiting{}) },
	})
	start(t, s)
	conn, err := grpc.NewClient("unix://"+s.Path(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	for _, timeout := range []time.Duration{500 * time.Millisecond, 3 * time.Second} {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		_, err = csi.NewNodeClient(conn).NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: "/t"})
		cancel()
		if msg := status.Convert(err).Message(); status.Code(err) != codes.DeadlineExceeded || !strings.Contains(msg, "mp-1 is not running") {
			t.Errorf("with a %v deadline the caller got %v, want the handler's reason", timeout, err)
		}
	}
}
