package command

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/testenv"
)

// safeBuffer is a bytes.Buffer that a following command writes while the test reads it.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is what one run of the command printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

// run runs kubectl-s3csi with args in-process, with no kubeconfig of the machine's.
func run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut safeBuffer
	code := Run(ctx, args, &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// isolate clears the NATS and kubeconfig variables of the environment for the test.
func isolate(t *testing.T) {
	t.Helper()
	for _, v := range []string{"NATS_URL", "NATS_USER", "NATS_PASSWORD_FILE", "NATS_TLS_CA_FILE",
		"NATS_TLS_CERT_FILE", "NATS_TLS_KEY_FILE", "MOUNTPOINT_NAMESPACE"} {
		t.Setenv(v, "")
		if err := os.Unsetenv(v); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "no-kubeconfig"))
}

// testBus is a real JetStream server with the events stream and a publisher on a connection with
// every right.
type testBus struct {
	srv *testenv.NATS
	js  jetstream.JetStream
	pub *events.Publisher
	// passwords are the files of the users' passwords when the server has the chart's users.
	passwords map[events.Service]string
	// admin connects to a server with users; nil otherwise.
	url string
}

// newBus starts a server without authentication, with the stream.
func newBus(t *testing.T) *testBus {
	t.Helper()
	b := &testBus{srv: testenv.StartNATS(t)}
	b.url = b.srv.URL()
	b.connect(t, nil)
	return b
}

// newAuthBus starts a server with the chart's users and permissions (events.AuthorizationConf)
// and an administrator, as whom js looks at the streams; events are published as the
// pod-reconciler.
func newAuthBus(t *testing.T) *testBus {
	t.Helper()
	dir := t.TempDir()
	b := &testBus{passwords: map[events.Service]string{}}
	for _, s := range events.Users() {
		pw := "pw-" + string(s) + "-0123456789"
		t.Setenv(events.PasswordVariable(s), pw)
		file := filepath.Join(dir, string(s)+".password")
		if err := os.WriteFile(file, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		b.passwords[s] = file
	}
	// The chart's users, and an administrator for the test to look at the streams.
	conf := strings.Replace(events.AuthorizationConf(), "  users = [\n",
		"  users = [\n    { user: \"test-admin\", password: \"test-admin-password\" }\n", 1)
	b.srv = testenv.StartNATSConf(t, conf)
	b.url = b.srv.URL()
	b.connect(t, []nats.Option{nats.UserInfo("test-admin", "test-admin-password")})
	pr := events.Auth{User: string(events.ServicePodReconciler), PasswordFile: b.passwords[events.ServicePodReconciler]}
	nc, err := events.Connect(testContext(t), b.url, t.Name(), logr.Discard(), pr.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	b.pub = events.NewPublisher(js, events.PublisherOptions{}) // publish as the service does
	return b
}

func (b *testBus) connect(t *testing.T, opts []nats.Option) {
	t.Helper()
	ctx := testContext(t)
	nc, err := events.Connect(ctx, b.url, t.Name(), logr.Discard(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if b.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, b.js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	b.pub = events.NewPublisher(b.js, events.PublisherOptions{})
}

// publish stores an event of payload p and returns its stream sequence.
func (b *testBus) publish(t *testing.T, p proto.Message) uint64 {
	t.Helper()
	e, err := events.New("/s3csi/cli-test", "", p)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := b.pub.Publish(testContext(t), e)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// publishRaw stores bytes on a subject, as anyone allowed to publish there could.
func (b *testBus) publishRaw(t *testing.T, subject string, data []byte) uint64 {
	t.Helper()
	ack, err := b.js.Publish(testContext(t), subject, data)
	if err != nil {
		t.Fatalf("publish raw to %s: %v", subject, err)
	}
	return ack.Sequence
}

// as returns the flags that connect as user (with its password file).
func (b *testBus) as(user events.Service) []string {
	return []string{"--nats-url", b.url, "--nats-user", string(user), "--nats-password-file", b.passwords[user]}
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// jsonRecords parses the output of -o json.
func jsonRecords(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("output line is not JSON: %v\n%s", err, line)
		}
		recs = append(recs, r)
	}
	return recs
}

// seqs are the sequences of records.
func seqs(recs []map[string]any) []uint64 {
	out := make([]uint64, 0, len(recs))
	for _, r := range recs {
		f, _ := r["seq"].(float64)
		out = append(out, uint64(f))
	}
	return out
}
