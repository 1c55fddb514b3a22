//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/fixture"
)

// canarySecretKey is a secret access key no sink may ever show: the publish that uses it fails
// (versitygw does not know it), so it also travels through an error.
const canarySecretKey = "CanarySecretKeyThatMustNeverLeak0123456789"

// A volume mounted with the keys of its own Secret and one whose Secret holds a wrong key: no
// secret key reaches the bus, a Kubernetes Event, an attachment, a pod's spec or status, a
// /metrics page, a container's log or a log of the cluster's components (kubelet logs the errors
// the node-agent returns over gRPC).
func TestSecretsReachNoSink(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := namespace(t, "canary")
	componentLogs := filepath.Join(cfg.StateDir, "logs")
	before := readTree(t, componentLogs)
	secrets := map[string]string{"good": cfg.S3SecretKey, "bad": canarySecretKey}
	for name, key := range secrets {
		create(ctx, t, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			StringData: map[string]string{"access_key_id": cfg.S3AccessKey, "secret_access_key": key},
		})
	}
	withSecret := func(name string) fixture.PVMod {
		return func(pv *corev1.PersistentVolume) {
			pv.Spec.CSI.VolumeAttributes["authenticationSource"] = "secret"
			pv.Spec.CSI.NodePublishSecretRef = &corev1.SecretReference{Name: name, Namespace: ns}
		}
	}
	good := staticClaim(ctx, t, ns, "good", withSecret("good"))
	staticClaim(ctx, t, ns, "bad", withSecret("bad"))

	ok := busybox(ns, "ok", "set -e\necho with-its-own-keys > /good/w.txt\ncat /good/seed.txt", claimVolume("good", "good"))
	create(ctx, t, ok)
	if out := waitPodDone(ctx, t, ok); out != "seed" {
		t.Errorf("the pod with its Secret's keys read %q, want seed", out)
	}
	if got := object(ctx, t, bucketOf(good), "w.txt"); got != "with-its-own-keys\n" {
		t.Errorf("object w.txt = %q", got)
	}
	refused := busybox(ns, "refused", "cat /bad/seed.txt", claimVolume("bad", "bad"))
	create(ctx, t, refused)
	eventually(ctx, t, "a FailedMount event on the pod with the wrong key", func() error {
		if events := podEvents(ctx, refused); !strings.Contains(events, "FailedMount") {
			return fmt.Errorf("events: %s", events)
		}
		return nil
	})

	sinks := map[string][]byte{
		"NATS stream " + events.StreamName: streamPayloads(ctx, t),
		"Kubernetes Events":                listJSON(ctx, t, &corev1.EventList{}),
		"MountpointS3PodAttachments":       listJSON(ctx, t, &s3csiv2.MountpointS3PodAttachmentList{}),
		"Mountpoint Pods":                  listJSON(ctx, t, &corev1.PodList{}, client.InNamespace(mountpointNamespace)),
		"s3csi pods":                       listJSON(ctx, t, &corev1.PodList{}, client.InNamespace("s3csi")),
	}
	for name, page := range metricsPages(ctx, t) {
		sinks["/metrics of "+name] = page
	}
	for path, b := range readTree(t, "/var/log/pods") {
		sinks[path] = b
	}
	// The components' logs outlive the cluster: only what they wrote during the test counts.
	for path, b := range readTree(t, componentLogs) {
		sinks[path] = b[min(len(before[path]), len(b)):]
	}
	for sink, b := range sinks {
		for name, key := range secrets {
			if bytes.Contains(b, []byte(key)) {
				t.Errorf("the secret key of Secret %q appears in %s", name, sink)
			}
		}
	}
	t.Logf("searched %d sinks", len(sinks))
}

// streamPayloads reads every message of the event stream from the chart's NATS as its read-only
// audit user, and returns subjects and payloads.
func streamPayloads(ctx context.Context, t testing.TB) []byte {
	t.Helper()
	var auth corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "s3csi", Name: "s3csi-nats-auth"}, &auth); err != nil {
		t.Fatalf("read the NATS passwords: %v", err)
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace("s3csi"), client.MatchingLabels{"app.kubernetes.io/component": "nats"}); err != nil || len(pods.Items) == 0 {
		t.Fatalf("find the NATS pod: %d pods, %v", len(pods.Items), err)
	}
	var natsTLS corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "s3csi", Name: "s3csi-nats-tls"}, &natsTLS); err != nil {
		t.Fatalf("read the NATS CA: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(natsTLS.Data["ca.crt"]) {
		t.Fatal("the Secret s3csi-nats-tls holds no CA certificate")
	}
	// The pod's address, checked against the name the services use.
	nc, err := nats.Connect("tls://"+pods.Items[0].Status.PodIP+":4222",
		nats.Secure(&tls.Config{ServerName: "s3csi-nats.s3csi.svc", RootCAs: roots, MinVersion: tls.VersionTLS12}),
		nats.UserInfo("audit", string(auth.Data["audit"])), nats.CustomInboxPrefix(events.InboxPrefix(events.UserAudit)), nats.Timeout(10*time.Second))
	if err != nil {
		t.Fatalf("connect to NATS: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	err = events.ReadStream(ctx, js, events.ReadOptions{}, func(e events.StoredEvent) error {
		all.WriteString(e.Subject + " ")
		all.Write(e.Data)
		all.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatalf("read the stream: %v", err)
	}
	if all.Len() == 0 {
		t.Fatal("the event stream is empty: the test's mounts should have published events")
	}
	return all.Bytes()
}

func listJSON(ctx context.Context, t testing.TB, list client.ObjectList, opts ...client.ListOption) []byte {
	t.Helper()
	if err := k8s.List(ctx, list, opts...); err != nil {
		t.Fatalf("list %T: %v", list, err)
	}
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// metricsPages fetches /metrics from every s3csi pod that announces a scrape port.
func metricsPages(ctx context.Context, t testing.TB) map[string][]byte {
	t.Helper()
	pages, err := readMetricsPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 4 {
		t.Fatalf("%d /metrics pages read, want one per service", len(pages))
	}
	return pages
}

// readMetricsPages is metricsPages for a goroutine that is not the test's: it returns the error.
func readMetricsPages(ctx context.Context) (map[string][]byte, error) {
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace("s3csi")); err != nil {
		return nil, err
	}
	pages := map[string][]byte{}
	for _, p := range pods.Items {
		port := p.Annotations["prometheus.io/port"]
		if port == "" || p.Status.PodIP == "" {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Status.PodIP+":"+port+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("/metrics of %s: %w", p.Name, err)
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("/metrics of %s: %s, %w", p.Name, resp.Status, err)
		}
		pages[p.Name] = b
	}
	return pages, nil
}

// readTree reads every regular file under dir.
func readTree(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files[path] = b
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	if len(files) == 0 {
		t.Fatalf("no file under %s: the logs are not where the test looks", dir)
	}
	return files
}
