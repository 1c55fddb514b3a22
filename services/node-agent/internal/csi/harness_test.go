package csi_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/keymutex"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
	"github.com/s3csi/s3csi/shared/testenv/testfs"

	"github.com/s3csi/s3csi/services/node-agent/internal/attach"
	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
	"github.com/s3csi/s3csi/services/node-agent/internal/csi"
	"github.com/s3csi/s3csi/services/node-agent/internal/podwatch"
	"github.com/s3csi/s3csi/services/node-agent/internal/source"
)

var apiServer *testenv.APIServer

// The mounters the Mountpoint Pods run, built from the mounter module by TestMain:
// testMounter serves the test filesystem (package testfs), s3Mounter is s3csi-mounter.
var testMounter, s3Mounter string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

// buildMounters builds the two mounter binaries into dir.
//
// Problem: a process that serves a FUSE filesystem and also reads it can deadlock (a garbage
// collection stops the world while a thread waits for an answer only that process can give).
// Solution: Mountpoint Pods run a mounter binary in a child process, as kubelet would.
// Invariant: no test process reads a FUSE mount it serves itself.
func buildMounters(dir string) error {
	ctx := context.Background()
	testMounter, s3Mounter = filepath.Join(dir, "fusetest-mounter"), filepath.Join(dir, "s3csi-mounter")
	if err := testenv.BuildModuleBinaryE(ctx, "services/mounter", testfs.MounterPackage, testMounter); err != nil {
		return err
	}
	return testenv.BuildModuleBinaryE(ctx, "services/mounter", "./cmd/s3csi-mounter", s3Mounter)
}

func runTests(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "these tests mount FUSE and bind mounts: run them as root")
		return 1
	}
	ctrllog.SetLogger(logr.Discard())
	bins, err := os.MkdirTemp("", "s3csi-mounters-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(bins) }()
	if err := buildMounters(bins); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := testenv.StartAPIServerE()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = s.Stop() }()
	apiServer = s
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mppod.DefaultNamespace}}
	if err := s.Client.Create(ctx, ns); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// logBuffer captures every log line of a node, secrets included if any leaked.
type logBuffer struct {
	mu  sync.Mutex
	buf []string
}

func (b *logBuffer) add(prefix, args string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, prefix+" "+args)
}

func (b *logBuffer) all() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := ""
	for _, l := range b.buf {
		out += l + "\n"
	}
	return out
}

// count returns how many lines hold s.
func (b *logBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, l := range b.buf {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// node is one node-agent's CSI node service against the shared API server, with a kubelet dir.
type node struct {
	t       testing.TB
	name    string
	kubelet *testenv.KubeletDir
	waiter  *attach.Waiter
	pods    *podwatch.Watcher
	server  *csi.Server
	client  csipb.NodeClient
	// identity is the same server's Identity service.
	identity csipb.IdentityClient
	logs     *logBuffer
	// realEngine makes Mountpoint Pods serve with the real s3fs engine.
	realEngine bool
	// finds counts the node service's one-off attachment reads (republish checks).
	finds atomic.Int64
	// mpLocks are the node service's per-Mountpoint-Pod locks, for a cleanup that shares them.
	mpLocks *keymutex.Mutex
}

// locks returns the node service's per-Mountpoint-Pod locks.
func (n *node) locks() *keymutex.Mutex { return n.mpLocks }

// countingWaiter counts the node service's one-off attachment reads.
type countingWaiter struct {
	*attach.Waiter
	finds *atomic.Int64
}

func (w *countingWaiter) Find(ctx context.Context, key attach.Key, volumeID string) (*attach.Assignment, error) {
	w.finds.Add(1)
	return w.Waiter.Find(ctx, key, volumeID)
}

type nodeOptions struct {
	fallback    time.Duration
	driverCreds credentials.Static
	// s3 makes the node's Mountpoint Pods serve this S3 server with the real engine.
	s3 *testenv.S3
	// legacyTokenFile is the web identity token refreshed for v1 mounts.
	legacyTokenFile string
	// unbound is called after every unpublish.
	unbound func()
	// deadSource is called before a dead source is mounted again.
	deadSource func(ctx context.Context, mountpointPod, exceptPodUID string)
	// resumeWait is how long a source whose mounter died waits for the next one; zero means
	// 100 ms: a killed mounter stands for one that kubelet does not restart.
	resumeWait time.Duration
	// replaced is called when a mounter was replaced under its workloads.
	replaced func(ctx context.Context, mountpointPod string, r handshake.Resumption)
	// warnWorkload records a Warning Event on a workload pod.
	warnWorkload func(ctx context.Context, pod types.NamespacedName, uid types.UID, reason, message string)
	// caBundleFile is the driver's CA bundle for the S3 endpoint (csi.Config.CABundleFile).
	caBundleFile string
}

func startNode(t testing.TB, o nodeOptions) *node {
	t.Helper()
	n := &node{t: t, name: "node-" + string(uuid.NewUUID())[:8], kubelet: testenv.StartKubeletDir(t), logs: &logBuffer{},
		realEngine: o.s3 != nil, mpLocks: &keymutex.Mutex{}}
	endpoint := ""
	if o.s3 != nil {
		endpoint = o.s3.Endpoint
	}
	log := funcr.New(n.logs.add, funcr.Options{Verbosity: 4})
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), log))
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if t.Failed() {
			t.Log("node-agent logs:\n" + n.logs.all())
		}
	})
	pods, err := podwatch.New(apiServer.Config, apiServer.Scheme, mppod.DefaultNamespace, n.name, fixture.MounterImage, apiServer.Client, o.fallback)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = pods.Start(ctx)
	}()
	if !pods.WaitForCacheSync(ctx) {
		t.Fatal("pod cache did not sync")
	}
	n.pods = pods
	n.waiter = attach.NewWaiter(n.name, apiServer.Client, o.fallback, nil)
	n.server = csi.NewServer(csi.Config{
		NodeName: n.name, DriverVersion: "test", KubeletDir: n.kubelet.Root,
		MountpointNamespace: mppod.DefaultNamespace, DriverCredentials: o.driverCreds, Region: "us-east-1",
		EndpointURL: endpoint, PathStyle: true, LegacyTokenFile: o.legacyTokenFile,
		Unbound: o.unbound, DeadSource: o.deadSource, ResumeWait: cmp.Or(o.resumeWait, 100*time.Millisecond),
		Replaced: o.replaced, WarnWorkload: o.warnWorkload, CABundleFile: o.caBundleFile,
	}, &countingWaiter{Waiter: n.waiter, finds: &n.finds}, pods, n.mpLocks, nil, nil)
	n.server.SetReady(true)
	g := csi.NewGRPCServer("unix://"+filepath.Join(t.TempDir(), "csi.sock"), n.server, log, nil)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = g.Start(ctx)
	}()
	<-g.Listening()
	conn, err := grpc.NewClient("unix://"+g.Path(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	n.client = csipb.NewNodeClient(conn)
	n.identity = csipb.NewIdentityClient(conn)
	return n
}

// mountpointPod is a Mountpoint Pod object and its mounter process.
type mountpointPod struct {
	pod     *corev1.Pod
	commDir string
	source  string
	proc    *exec.Cmd
	exited  chan error
}

// createMountpointPod creates the pod object, sets it Running and starts its mounter process
// with a comm dir where the node-agent expects it, as kubelet would.
func (n *node) createMountpointPod(name string) *mountpointPod {
	n.t.Helper()
	mp, err := n.startMountpointPod(context.Background(), name)
	if err != nil {
		n.t.Fatal(err)
	}
	return mp
}

// startMountpointPod is createMountpointPod returning its error, for callers that are not the
// test's goroutine.
func (n *node) startMountpointPod(ctx context.Context, name string) (*mountpointPod, error) {
	mp, err := n.newMountpointPod(ctx, name)
	if err != nil {
		return nil, err
	}
	n.t.Cleanup(func() { cleanupMount(n.t, n.kubelet.SourceDir(name)) })
	if err := mp.start(n.t, n.realEngine); err != nil {
		return nil, err
	}
	return mp, n.setRunning(ctx, mp)
}

// newMountpointPod creates the pod object and its comm dir where the node-agent expects it.
func (n *node) newMountpointPod(ctx context.Context, name string) (*mountpointPod, error) {
	pod := fixture.MountpointPod(name, n.name)
	if err := apiServer.Client.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("create Mountpoint Pod %s: %w", name, err)
	}
	n.t.Cleanup(func() { _ = apiServer.Client.Delete(context.WithoutCancel(ctx), pod) })
	commDir, err := source.CommDir(n.kubelet.Root, string(pod.UID))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(commDir, 0o750); err != nil {
		return nil, fmt.Errorf("create comm dir: %w", err)
	}
	return &mountpointPod{pod: pod, commDir: commDir, source: n.kubelet.SourceDir(name)}, nil
}

func (n *node) setRunning(ctx context.Context, mp *mountpointPod) error {
	mp.pod.Status.Phase = corev1.PodRunning
	if err := apiServer.Client.Status().Update(ctx, mp.pod); err != nil {
		return fmt.Errorf("set Mountpoint Pod %s Running: %w", mp.pod.Name, err)
	}
	return nil
}

// replaceMountpointPod plays kubelet and the pod-reconciler after mp's mounter handed its mount
// over: mp's pod object goes and a pod of the same name, with a new UID and comm dir, replaces
// it; its mounter is next, forked by standby, which execs in the new comm dir.
func (n *node) replaceMountpointPod(ctx context.Context, mp *mountpointPod, next func(commDir string)) *mountpointPod {
	n.t.Helper()
	if err := apiServer.Client.Delete(ctx, mp.pod, client.GracePeriodSeconds(0)); err != nil {
		n.t.Fatal(err)
	}
	testenv.Eventually(n.t, 10*time.Second, "the old Mountpoint Pod gone", func() bool {
		err := apiServer.Client.Get(ctx, client.ObjectKeyFromObject(mp.pod), &corev1.Pod{})
		return apierrors.IsNotFound(err)
	})
	if err := os.RemoveAll(mp.commDir); err != nil { // kubelet removes the pod's emptyDir
		n.t.Fatal(err)
	}
	fresh, err := n.newMountpointPod(ctx, mp.pod.Name)
	if err != nil {
		n.t.Fatal(err)
	}
	fresh.proc, fresh.exited = mp.proc, mp.exited
	next(fresh.commDir)
	if err := n.setRunning(ctx, fresh); err != nil {
		n.t.Fatal(err)
	}
	return fresh
}

func (mp *mountpointPod) start(t testing.TB, realEngine bool) error {
	_, err := mp.spawn(t, realEngine, false)
	return err
}

// standby starts the next mounter of the pod, as kubelet restarts the container or starts the pod
// that replaces it, but lets it exec only when next is called, with its comm dir.
//
// Problem: exec closes the test process's descriptors in the child, and closing a file of a FUSE
// mount whose server died waits for that server: a test that holds a file of the mount open
// cannot start the next mounter after the kill.
// Solution: fork a shell waiting on its stdin while the server lives; next lets it exec.
// Invariant: a test that ends a mounter under an open file starts the next one with standby.
func (mp *mountpointPod) standby(t testing.TB, realEngine bool) (next func(commDir string), err error) {
	return mp.spawn(t, realEngine, true)
}

func (mp *mountpointPod) spawn(t testing.TB, realEngine, standby bool) (func(string), error) {
	bin := testMounter
	if realEngine {
		bin = s3Mounter
	}
	cmd := exec.Command(bin, "--comm-dir="+mp.commDir)
	next := func(string) {}
	if standby {
		cmd = exec.Command("/bin/sh", "-c", `read -r dir && exec "$0" "--comm-dir=$dir"`, bin)
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		next = func(commDir string) { _, _ = in.Write([]byte(commDir + "\n")) }
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start mounter: %w", err)
	}
	exited := make(chan error, 1)
	mp.proc, mp.exited = cmd, exited
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = receive(exited) // this process's, even when the pod's mounter was started again
	})
	return next, nil
}

// kill ends the mounter as a crash would that kubelet does not follow with a restart: once the
// node-agent stopped waiting for the next mounter (nodeOptions.resumeWait), its FUSE mounts stay
// and answer ENOTCONN.
func (mp *mountpointPod) kill(t testing.TB) {
	t.Helper()
	_ = mp.proc.Process.Kill()
	select {
	case err := <-mp.exited:
		mp.exited <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("mounter did not die")
	}
	testenv.Eventually(t, 10*time.Second, "the node-agent to let the dead mounter's connection go", func() bool {
		state, _, err := mount.CheckWithin(mp.source, 50*time.Millisecond)
		return err == nil && state != mount.Hung
	})
}

// assign records workload pod uid as served by mp in an attachment for pv on this node; keys
// set the attachment's sharing key fields (mount options, read-only...).
func (n *node) assign(pvName, volumeID, podUID, mpName string, keys ...func(*s3csiv2.MountpointS3PodAttachmentSpec)) *s3csiv2.MountpointS3PodAttachment {
	n.t.Helper()
	s3pa, err := n.createAttachment(context.Background(), pvName, volumeID, podUID, mpName, keys...)
	if err != nil {
		n.t.Fatal(err)
	}
	return s3pa
}

// createAttachment is assign returning its error.
func (n *node) createAttachment(ctx context.Context, pvName, volumeID, podUID, mpName string, keys ...func(*s3csiv2.MountpointS3PodAttachmentSpec)) (*s3csiv2.MountpointS3PodAttachment, error) {
	s3pa := &s3csiv2.MountpointS3PodAttachment{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "s3pa-"},
		Spec: s3csiv2.MountpointS3PodAttachmentSpec{
			NodeName: n.name, PersistentVolumeName: pvName, VolumeID: volumeID,
			MountpointS3PodAttachments: map[string][]s3csiv2.WorkloadAttachment{
				mpName: {{WorkloadPodUID: podUID, AttachmentTime: metav1.Now()}},
			},
		},
	}
	for _, k := range keys {
		k(&s3pa.Spec)
	}
	if err := apiServer.Client.Create(ctx, s3pa); err != nil {
		return nil, fmt.Errorf("create attachment for %s: %w", pvName, err)
	}
	n.t.Cleanup(func() { _ = apiServer.Client.Delete(context.WithoutCancel(ctx), s3pa) })
	return s3pa, nil
}

// addWorkload adds a workload to an existing attachment.
func (n *node) addWorkload(s3pa *s3csiv2.MountpointS3PodAttachment, mpName, podUID string) {
	n.t.Helper()
	if err := n.attachWorkload(context.Background(), s3pa, mpName, podUID); err != nil {
		n.t.Fatal(err)
	}
}

// attachWorkload is addWorkload returning its error.
func (n *node) attachWorkload(ctx context.Context, s3pa *s3csiv2.MountpointS3PodAttachment, mpName, podUID string) error {
	s3pa.Spec.MountpointS3PodAttachments[mpName] = append(s3pa.Spec.MountpointS3PodAttachments[mpName],
		s3csiv2.WorkloadAttachment{WorkloadPodUID: podUID, AttachmentTime: metav1.Now()})
	if err := apiServer.Client.Update(ctx, s3pa); err != nil {
		return fmt.Errorf("add workload %s to attachment %s: %w", podUID, s3pa.Name, err)
	}
	return nil
}

// target makes the parent of a workload's target path, as kubelet does, and returns the path.
func (n *node) target(podUID types.UID, pvName string) string {
	n.t.Helper()
	p := n.kubelet.TargetPath(string(podUID), pvName)
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { cleanupMount(n.t, p) })
	return p
}

func cleanupMount(t testing.TB, dir string) {
	if err := mount.Unmount(dir); err != nil {
		t.Logf("unmount %s: %v; detaching lazily", dir, err)
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	}
}

func publishRequest(volumeID, target, bucket string, podUID types.UID, flags ...string) *csipb.NodePublishVolumeRequest {
	return &csipb.NodePublishVolumeRequest{
		VolumeId:   volumeID,
		TargetPath: target,
		VolumeCapability: &csipb.VolumeCapability{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{MountFlags: flags}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		},
		VolumeContext: map[string]string{"bucketName": bucket, "csi.storage.k8s.io/pod.uid": string(podUID)},
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

// receive waits for the process's exit status.
func receive(ch <-chan error) error { return <-ch }
