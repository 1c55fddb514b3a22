package mount

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// propagationEnv makes the test binary run propagationChild in a mount namespace of its own.
const propagationEnv = "S3CSI_TEST_PROPAGATION_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(propagationEnv); dir != "" {
		if err := propagationChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// propagationCase is what the child saw for one container volume propagation.
type propagationCase struct {
	// Verdict is CheckPropagates's error text, "" when it passed.
	Verdict string
	// Propagation is PropagationOf the mount CheckPropagates found.
	Propagation Propagation
	// Reached says whether a mount made in the container's view showed in the host's.
	Reached bool
}

// propagationChild plays, for each mountPropagation of a container volume, a host kubelet dir
// (shared, as kubelet makes it) and the container's view of it (a bind with that volume's
// propagation), runs CheckPropagates on a target's parent in the container's view, then makes
// a mount there and looks whether the host's view got it. It prints the cases as JSON.
func propagationChild(dir string) error {
	mounts := []struct {
		name  string
		flags uintptr
	}{{"Bidirectional", unix.MS_SHARED}, {"HostToContainer", unix.MS_SLAVE}, {"None", unix.MS_PRIVATE}}
	out := map[string]propagationCase{}
	for _, m := range mounts {
		host, container := filepath.Join(dir, m.name, "host"), filepath.Join(dir, m.name, "container")
		for _, d := range []string{host, container} {
			if err := os.MkdirAll(d, 0o750); err != nil {
				return err
			}
		}
		if err := unix.Mount(host, host, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind host dir: %w", err)
		}
		if err := unix.Mount("", host, "", unix.MS_SHARED, ""); err != nil {
			return fmt.Errorf("make host dir shared: %w", err)
		}
		if err := unix.Mount(host, container, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind container view: %w", err)
		}
		if err := unix.Mount("", container, "", m.flags, ""); err != nil {
			return fmt.Errorf("set container view propagation: %w", err)
		}
		// The target's parent does not exist yet: kubelet makes it only for the publish.
		parent := filepath.Join(container, "pods", "uid", "volumes", "kubernetes.io~csi", "pv")
		entry, err := CheckPropagates(parent)
		c := propagationCase{Propagation: PropagationOf(entry)}
		if err != nil {
			c.Verdict = err.Error()
			if !errors.Is(err, ErrNotPropagated) {
				return err
			}
		}
		if entry.MountPoint != container {
			return fmt.Errorf("%s: CheckPropagates looked at %s, want %s", m.name, entry.MountPoint, container)
		}
		target := filepath.Join(parent, "mount")
		if err := os.MkdirAll(target, 0o750); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", target, "tmpfs", 0, "size=64k"); err != nil {
			return fmt.Errorf("mount at the target: %w", err)
		}
		table, err := ReadTable()
		if err != nil {
			return err
		}
		_, c.Reached = table.Lookup(filepath.Join(host, "pods", "uid", "volumes", "kubernetes.io~csi", "pv", "mount"))
		out[m.name] = c
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// TestCheckPropagatesAgreesWithTheKernel runs, in a mount namespace of its own (the host's is
// left alone), a container view of a kubelet dir for each mountPropagation, and checks that
// CheckPropagates passes exactly where a mount made in the container reaches the host.
func TestCheckPropagatesAgreesWithTheKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test makes mounts in a new mount namespace: run it as root")
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), propagationEnv+"="+t.TempDir())
	// A new mount namespace, whose / Go makes private first: nothing leaks to the host's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	cmd.Stderr = os.Stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var got map[string]propagationCase
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("child output %q: %v", raw, err)
	}
	for _, tt := range []struct {
		volume  string
		want    Propagation
		reaches bool
	}{
		{volume: "Bidirectional", want: Shared, reaches: true},
		{volume: "HostToContainer", want: Slave},
		{volume: "None", want: Private},
	} {
		t.Run(tt.volume, func(t *testing.T) {
			c, ok := got[tt.volume]
			if !ok {
				t.Fatalf("no result in %s", raw)
			}
			if c.Reached != tt.reaches {
				t.Fatalf("the kernel propagated a mount: %v, want %v (the test's set-up is wrong)", c.Reached, tt.reaches)
			}
			if c.Propagation != tt.want {
				t.Errorf("propagation %s, want %s", c.Propagation, tt.want)
			}
			if passed := c.Verdict == ""; passed != c.Reached {
				t.Errorf("CheckPropagates verdict %q, but a mount made there reached the host: %v", c.Verdict, c.Reached)
			}
		})
	}
}

func TestContaining(t *testing.T) {
	table := Table{
		{MountPoint: "/"},
		{MountPoint: "/var/lib/kubelet", OptionalFields: []string{"master:1"}},
		{MountPoint: "/var/lib/kubelet", OptionalFields: []string{"shared:7"}},
		{MountPoint: "/var/lib/kubelet-other"},
		{MountPoint: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount"},
	}
	for _, tt := range []struct {
		path, want string
		prop       Propagation
	}{
		{path: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv", want: "/var/lib/kubelet", prop: Shared},
		{path: "/var/lib/kubelet", want: "/var/lib/kubelet", prop: Shared},
		{path: "/var/lib/kubelet-other/x", want: "/var/lib/kubelet-other", prop: Private},
		{path: "/var/lib/kubeletx", want: "/", prop: Private},
		{path: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount/a", want: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount"},
	} {
		e, ok := table.Containing(tt.path)
		if !ok || e.MountPoint != tt.want {
			t.Errorf("Containing(%s) = %s, want %s", tt.path, e.MountPoint, tt.want)
		}
		if tt.prop != "" && PropagationOf(e) != tt.prop {
			t.Errorf("propagation of the mount containing %s = %s, want %s (the topmost mount)", tt.path, PropagationOf(e), tt.prop)
		}
	}
}
