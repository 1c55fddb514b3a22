//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/s3csi/s3csi/shared/fixture"
)

// A read-only PersistentVolume and a read-only volume mount of a writable one (scenario S11): the
// workload reads; its write, rename, truncation, deletion and mkdir fail with EROFS; the mount is
// ro in the container and the bucket is unchanged.
func TestReadOnlyVolumeAndReadOnlyMount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := namespace(t, "readonly")
	roPV := staticClaim(ctx, t, ns, "ro-pv", fixture.WithCSIReadOnly())
	rwPV := staticClaim(ctx, t, ns, "ro-mount")
	script := strings.Join([]string{
		"for d in /ro-pv /ro-mount; do",
		"  echo \"$d seed: $(cat $d/seed.txt)\"",
		// Each in a subshell: a failed redirection ends a non-interactive shell, and the
		// subshell's 2> catches the shell's own "can't create" message.
		"  for op in 'echo x > $d/new.txt' 'mv $d/seed.txt $d/moved.txt' ': > $d/seed.txt' 'rm $d/seed.txt' 'mkdir $d/dir'; do",
		"    if (eval \"$op\") 2>/tmp/err; then echo \"$d SUCCEEDED: $op\"; else echo \"$d refused: $op: $(cat /tmp/err)\"; fi",
		"  done",
		"  grep \" $d \" /proc/mounts",
		"done",
	}, "\n")
	pod := busybox(ns, "reader", script, claimVolume("ro-pv", "ro-pv"), claimVolume("ro-mount", "ro-mount"))
	pod.Spec.Containers[0].VolumeMounts[1].ReadOnly = true
	create(ctx, t, pod)
	out := waitPodDone(ctx, t, pod)
	for _, d := range []string{"/ro-pv", "/ro-mount"} {
		if !strings.Contains(out, d+" seed: seed") {
			t.Errorf("the workload did not read %s/seed.txt; it printed:\n%s", d, out)
		}
		if strings.Contains(out, d+" SUCCEEDED") {
			t.Errorf("a change through %s succeeded:\n%s", d, out)
		}
		if n := refusedReadOnly(out, d); n != 5 {
			t.Errorf("%d of the write, rename, truncation, deletion and mkdir through %s were refused with \"Read-only file system\", want 5:\n%s", n, d, out)
		}
		if !mountedReadOnly(out, d) {
			t.Errorf("%s is not mounted ro in the container:\n%s", d, out)
		}
	}
	for _, pv := range []*corev1.PersistentVolume{roPV, rwPV} {
		if got := object(ctx, t, bucketOf(pv), "seed.txt"); got != "seed" {
			t.Errorf("seed.txt of bucket %s holds %q after the refused calls, want \"seed\"", bucketOf(pv), got)
		}
		for _, key := range []string{"new.txt", "moved.txt", "dir/"} {
			absent(ctx, t, bucketOf(pv), key)
		}
	}
}

// refusedReadOnly counts the lines of out that report a refused change through dir with EROFS.
func refusedReadOnly(out, dir string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, dir+" refused: ") && strings.Contains(line, "Read-only file system") {
			n++
		}
	}
	return n
}

// mountedReadOnly reports whether a /proc/mounts line of dir in out has the ro option.
func mountedReadOnly(out, dir string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[1] == dir {
			return strings.HasPrefix(f[3], "ro,") || f[3] == "ro"
		}
	}
	return false
}

// Two pods of one claim with different fsGroups: each sees the files owned by its own group, and
// they do not share a Mountpoint Pod (a mount's gid is fixed when it is made).
func TestFSGroupOwnsTheFilesAndSeparatesMountpointPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := namespace(t, "fsgroup")
	pv := staticClaim(ctx, t, ns, "data")
	var pods []*corev1.Pod
	for _, gid := range []int64{2000, 3000} {
		name := fmt.Sprintf("g%d", gid)
		pod := busybox(ns, name, "set -e\necho "+name+" > /data/"+name+".txt\necho \"group: $(stat -c %g /data/seed.txt) $(stat -c %g /data/"+name+".txt)\"\nexec sleep 3600",
			claimVolume("data", "data"))
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To(gid)}
		create(ctx, t, pod)
		pods = append(pods, pod)
	}
	waitRunning(ctx, t, pods...)
	for i, gid := range []int64{2000, 3000} {
		want := fmt.Sprintf("group: %d %d", gid, gid)
		eventually(ctx, t, "pod "+pods[i].Name+" prints its group", func() error {
			if out := podLog(ctx, t, pods[i]); !strings.Contains(out, want) {
				return fmt.Errorf("its log is %q, want %q", out, want)
			}
			return nil
		})
	}
	_, mps, err := attachmentsOf(ctx, pv.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(mps) != 2 {
		t.Fatalf("%d Mountpoint Pods serve the volume, want 2 (one per fsGroup)", len(mps))
	}
}

// The PV's mountOptions reach the mounter: uid and gid own the files, allow-delete lets the
// workload remove an object, prefix scopes the volume to a key prefix.
func TestMountOptionsOfThePersistentVolume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := namespace(t, "options")
	pv := staticClaim(ctx, t, ns, "data", fixture.WithMountOptions("uid=1234", "gid=2345", "allow-delete", "prefix=sub/"))
	if err := cfg.MakeBucket(ctx, bucketOf(pv), "sub/old.txt", "old"); err != nil {
		t.Fatal(err)
	}
	pod := busybox(ns, "w", strings.Join([]string{
		"set -e",
		"echo \"owner: $(stat -c '%u %g' /data/old.txt)\"",
		"echo \"old: $(cat /data/old.txt)\"",
		"rm /data/old.txt",
		"echo new > /data/new.txt",
		"echo \"listing: $(ls /data | tr '\\n' ' ')\"",
	}, "\n"), claimVolume("data", "data"))
	create(ctx, t, pod)
	out := waitPodDone(ctx, t, pod)
	for _, want := range []string{"owner: 1234 2345", "old: old", "listing: new.txt "} {
		if !strings.Contains(out, want) {
			t.Errorf("the workload's output lacks %q; it printed:\n%s", want, out)
		}
	}
	absent(ctx, t, bucketOf(pv), "sub/old.txt")
	if got := object(ctx, t, bucketOf(pv), "sub/new.txt"); got != "new\n" {
		t.Errorf("object sub/new.txt = %q, want the line the pod wrote under the prefix", got)
	}
	absent(ctx, t, bucketOf(pv), "new.txt")
}

// A mount option the driver refuses: the workload does not start, and its events name the option.
func TestAForbiddenMountOptionIsNamedInTheWorkloadsEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := namespace(t, "forbidden")
	pv := staticClaim(ctx, t, ns, "data", fixture.WithMountOptions("endpoint-url=http://10.0.0.1:9000"))
	pod := busybox(ns, "w", "cat /data/seed.txt", claimVolume("data", "data"))
	create(ctx, t, pod)
	eventually(ctx, t, "a FailedMount event naming endpoint-url", func() error {
		if events := podEvents(ctx, pod); !strings.Contains(events, "FailedMount") || !strings.Contains(events, "endpoint-url") {
			return fmt.Errorf("events: %s", events)
		}
		return nil
	})
	if err := getPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if pod.Status.Phase != corev1.PodPending {
		t.Errorf("the workload is %s, want it Pending: its volume must not mount", pod.Status.Phase)
	}

	// The Mountpoint Pod made for it never got a mount request; it goes with the workload.
	if err := k8s.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "no Mountpoint Pod or attachment left for the volume", func() error {
		atts, mps, err := attachmentsOf(ctx, pv.Name)
		if err != nil {
			return err
		}
		if len(atts)+len(mps) > 0 {
			return fmt.Errorf("%d attachments and %d Mountpoint Pods remain", len(atts), len(mps))
		}
		return nil
	})
}

// Two PersistentVolumes with one volumeHandle in one pod (S29): kubelet mounts a handle once per
// pod and waits for the other volume for ever, so the workload is told at once, with the fix, and
// cleaned up when it goes.
func TestTwoVolumesWithOneHandleInAPodAreNamedInItsEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := namespace(t, "samehandle")
	first := staticClaim(ctx, t, ns, "first")
	second := staticClaim(ctx, t, ns, "second", fixture.WithVolumeHandle(bucketOf(first)))
	pod := busybox(ns, "both", "cat /first/seed.txt /second/seed.txt", claimVolume("first", "first"), claimVolume("second", "second"))
	create(ctx, t, pod)
	start := time.Now()
	eventually(ctx, t, "an InvalidVolume event naming both volumes and the handle", func() error {
		events := podEvents(ctx, pod)
		for _, want := range []string{"InvalidVolume", first.Name, second.Name, `same volumeHandle "` + bucketOf(first) + `"`} {
			if !strings.Contains(events, want) {
				return fmt.Errorf("the events lack %q: %s", want, events)
			}
		}
		return nil
	})
	told := time.Now()
	if err := getPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// The claims bind and the scheduler places the pod first, at their own pace; the
	// pod-reconciler acts once the pod is scheduled.
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			t.Logf("the workload was told %s after its creation, %s after it was scheduled (condition times are in seconds)",
				told.Sub(start).Round(time.Millisecond), told.Sub(c.LastTransitionTime.Time).Round(time.Second))
		}
	}

	if err := k8s.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "no Mountpoint Pod or attachment left for either volume", func() error {
		for _, pv := range []string{first.Name, second.Name} {
			atts, mps, err := attachmentsOf(ctx, pv)
			if err != nil {
				return err
			}
			if len(atts)+len(mps) > 0 {
				return fmt.Errorf("%d attachments and %d Mountpoint Pods remain for %s", len(atts), len(mps), pv)
			}
		}
		return nil
	})
}

// A pod with two S3 volumes, one of them mounted at two more paths, once with a subPath (S29): every
// mount serves, and the mounts of one volume show the same objects. (A pod that lists one claim under
// two volumes never starts: kubelet waits for one of the two forever, whatever the driver; one
// volume with several volumeMounts is the way.)
func TestTwoVolumesInOnePodAndOneVolumeMountedThrice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := namespace(t, "multi")
	one := staticClaim(ctx, t, ns, "one")
	two := staticClaim(ctx, t, ns, "two")
	pod := busybox(ns, "w", strings.Join([]string{
		"set -e",
		"echo a > /a/from-a.txt",
		"echo b > /b/from-b.txt",
		"echo s > /sub/from-sub.txt",
		"echo \"again: $(cat /again/from-a.txt)\"",
		"echo \"b: $(cat /b/from-b.txt)\"",
		"echo \"sub: $(cat /a/dir/from-sub.txt)\"",
	}, "\n"), claimVolume("a", "one"), claimVolume("b", "two"))
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts,
		corev1.VolumeMount{Name: "a", MountPath: "/again"}, corev1.VolumeMount{Name: "a", MountPath: "/sub", SubPath: "dir"})
	create(ctx, t, pod)
	out := waitPodDone(ctx, t, pod)
	for _, want := range []string{"again: a", "b: b", "sub: s"} {
		if !strings.Contains(out, want) {
			t.Errorf("the workload's output lacks %q; it printed:\n%s", want, out)
		}
	}
	if got := object(ctx, t, bucketOf(one), "from-a.txt"); got != "a\n" {
		t.Errorf("object from-a.txt in the first bucket = %q", got)
	}
	if got := object(ctx, t, bucketOf(one), "dir/from-sub.txt"); got != "s\n" {
		t.Errorf("object dir/from-sub.txt in the first bucket = %q", got)
	}
	if got := object(ctx, t, bucketOf(two), "from-b.txt"); got != "b\n" {
		t.Errorf("object from-b.txt in the second bucket = %q", got)
	}
	absent(ctx, t, bucketOf(two), "from-a.txt")
}

// absent fails the test when the object exists.
func absent(ctx context.Context, t testing.TB, bucket, key string) {
	t.Helper()
	_, err := cfg.S3Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err == nil {
		t.Errorf("object %s/%s exists, want none", bucket, key)
		return
	}
	var coded interface{ ErrorCode() string }
	if !errors.As(err, &coded) || (coded.ErrorCode() != "NotFound" && coded.ErrorCode() != "NoSuchKey") {
		t.Errorf("head object %s/%s: %v", bucket, key, err)
	}
}
