package sharingkey_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/fixture"

	"github.com/s3csi/s3csi/services/pod-reconciler/internal/sharingkey"
)

func claimOf(p *corev1.Pod) *corev1.PersistentVolumeClaimVolumeSource {
	return p.Spec.Volumes[0].PersistentVolumeClaim
}

func TestForWorkload(t *testing.T) {
	base := func() (*corev1.Pod, *corev1.PersistentVolume) {
		return fixture.Pod("app", fixture.OnNode("node-a"), fixture.WithClaim("data", "claim")),
			fixture.PV("pv-1", fixture.WithMountOptions("--allow-delete", "--uid=1000"))
	}
	want := sharingkey.Key{
		NodeName: "node-a", PersistentVolumeName: "pv-1", VolumeID: "pv-1-handle",
		MountOptions: "--allow-delete,--uid=1000", AuthenticationSource: "driver",
	}
	tests := []struct {
		name    string
		modify  func(*corev1.Pod, *corev1.PersistentVolume)
		want    func(*sharingkey.Key)
		wantErr string
	}{
		{name: "a plain workload keys on node, volume and mount options in their order", modify: func(*corev1.Pod, *corev1.PersistentVolume) {}, want: func(*sharingkey.Key) {}},
		{
			name:   "the fsGroup is recorded in decimal",
			modify: func(p *corev1.Pod, _ *corev1.PersistentVolume) { fixture.WithFSGroup(2000)(p) },
			want:   func(k *sharingkey.Key) { k.WorkloadFSGroup = "2000" },
		},
		{
			name: "a read-only claim is read-only",
			modify: func(p *corev1.Pod, _ *corev1.PersistentVolume) {
				p.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly = true
			},
			want: func(k *sharingkey.Key) { k.ReadOnly = true },
		},
		{
			name:   "a read-only CSI source is read-only",
			modify: func(_ *corev1.Pod, pv *corev1.PersistentVolume) { fixture.WithCSIReadOnly()(pv) },
			want:   func(k *sharingkey.Key) { k.ReadOnly = true },
		},
		{
			name: "secret credentials do not key on the workload identity",
			modify: func(_ *corev1.Pod, pv *corev1.PersistentVolume) {
				fixture.WithVolumeAttribute("authenticationSource", "secret")(pv)
			},
			want: func(k *sharingkey.Key) { k.AuthenticationSource = "secret" },
		},
		{
			name: "per-pod credentials key on namespace and service account",
			modify: func(p *corev1.Pod, pv *corev1.PersistentVolume) {
				fixture.WithVolumeAttribute("authenticationSource", "pod")(pv)
				p.Namespace = "team-a"
			},
			want: func(k *sharingkey.Key) {
				k.AuthenticationSource = "pod"
				k.WorkloadNamespace = "team-a"
				k.WorkloadServiceAccountName = "default"
			},
		},
		{
			name: "an unknown authentication source is refused",
			modify: func(_ *corev1.Pod, pv *corev1.PersistentVolume) {
				fixture.WithVolumeAttribute("authenticationSource", "env")(pv)
			},
			wantErr: "authenticationSource",
		},
		{
			name:    "a PV that is not CSI is refused",
			modify:  func(_ *corev1.Pod, pv *corev1.PersistentVolume) { fixture.WithHostPathSource("/x")(pv) },
			wantErr: "not a CSI volume",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod, pv := base()
			tt.modify(pod, pv)
			got, err := sharingkey.ForWorkload(pod, claimOf(pod), pv)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ForWorkload() error = %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w := want
			tt.want(&w)
			if got != w {
				t.Errorf("ForWorkload() = %s\nwant %s", got, w)
			}
			spec := got.Spec()
			if !got.Matches(&spec) {
				t.Errorf("the key does not match the spec it builds")
			}
		})
	}
}

func TestMatches(t *testing.T) {
	key := sharingkey.Key{NodeName: "n", PersistentVolumeName: "pv", VolumeID: "h", AuthenticationSource: "driver"}
	tests := []struct {
		name   string
		modify func(*s3csiv2.MountpointS3PodAttachmentSpec)
		want   bool
	}{
		{name: "an attachment of the v2 driver without authentication source means driver", modify: func(s *s3csiv2.MountpointS3PodAttachmentSpec) { s.AuthenticationSource = "" }, want: true},
		{name: "another node does not match", modify: func(s *s3csiv2.MountpointS3PodAttachmentSpec) { s.NodeName = "m" }},
		{name: "another fsGroup does not match", modify: func(s *s3csiv2.MountpointS3PodAttachmentSpec) { s.WorkloadFSGroup = "1" }},
		{name: "read-only does not match read-write", modify: func(s *s3csiv2.MountpointS3PodAttachmentSpec) { s.ReadOnly = true }},
		{name: "mount options in another order do not match", modify: func(s *s3csiv2.MountpointS3PodAttachmentSpec) { s.MountOptions = "b,a" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := key.Spec()
			tt.modify(&spec)
			if got := key.Matches(&spec); got != tt.want {
				t.Errorf("Matches() = %t, want %t", got, tt.want)
			}
		})
	}
	if f := key.SelectableFields(); len(f) != len(s3csiv2.SelectableFields) {
		t.Errorf("SelectableFields() has %d fields, want the CRD's %d", len(f), len(s3csiv2.SelectableFields))
	}
}
