//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/s3csi/s3csi/integration/cluster"
)

// pullSecret is the Secret of the Mountpoint namespace the private registry's test pulls with.
const pullSecret = "regcred"

// Mountpoint Pods pull the mounter image from a private registry with the chart's pull Secret,
// created in their namespace as docs/helm.md says; with a wrong credential in that Secret, the
// workload's FailedMount Event names the Secret. The cluster's registry has a private part (user
// and password, cluster.PrivatePrefix) the mounter image is copied into, under two tags new to
// the node: a node that holds an image pulls it no more, so the wrong credential is tried on the
// second.
func TestMountpointPodsPullFromAPrivateRegistryWithThePullSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	logf := func(f string, a ...any) { t.Logf(f, a...) }
	tag, err := cfg.ReleaseTag()
	if err != nil {
		t.Fatal(err)
	}
	auth := remote.WithAuth(&authn.Basic{Username: cluster.RegistryUser, Password: cfg.PrivateRegistryPassword()})
	src, err := name.NewTag(cfg.RegistryPrefix()+"/mounter:"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(src, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("read the mounter image: %v", err)
	}
	// Tags of this run only: a node that pulled an image under a tag holds it from then on.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	good, bad := tag+"-"+run+"-a", tag+"-"+run+"-b"
	repo := cluster.PrivatePrefix + "/s3csi/mounter"
	for _, tg := range []string{good, bad} {
		dst, err := name.NewTag(cfg.RegistryHost()+"/"+repo+":"+tg, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.WriteIndex(dst, idx, auth, remote.WithContext(ctx)); err != nil {
			t.Fatalf("copy the mounter image to the private registry: %v", err)
		}
	}
	// Restored after the namespace below is gone, with the Mountpoint Pods of its workloads.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		defer cancel()
		if err := k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mountpointNamespace, Name: pullSecret}}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete the pull Secret: %v", err)
		}
		if err := cfg.InstallChart(ctx, logf); err != nil {
			t.Errorf("install the chart back: %v", err)
		}
	})
	ns := namespace(t, "registry")
	setPullSecret(ctx, t, cfg.PrivateRegistryPassword())
	if err := cfg.InstallChart(ctx, logf, "--set", "image.repositories.mounter="+repo, "--set", "image.tags.mounter="+good,
		"--set-json", fmt.Sprintf("mountpointPod.imagePullSecrets=[%q]", pullSecret)); err != nil {
		t.Fatalf("install with the mounter image from the private registry: %v", err)
	}

	pv := staticClaim(ctx, t, ns, "data")
	// The newline ends the log line: a partial line stays out of the pod's log.
	reader := busybox(ns, "reader", "cat /data/seed.txt && echo && sleep 3600", claimVolume("data", "data"))
	create(ctx, t, reader)
	waitRunning(ctx, t, reader)
	mp := onlyMountpointPod(ctx, t, pv.Name)
	if image := mp.Spec.Containers[0].Image; image != cfg.RegistryHost()+"/"+repo+":"+good {
		t.Errorf("the Mountpoint Pod runs %s, want the private registry's mounter", image)
	}
	if got := mp.Spec.ImagePullSecrets; !slices.Equal(got, []corev1.LocalObjectReference{{Name: pullSecret}}) {
		t.Errorf("the Mountpoint Pod pulls with %v, want [%s]", got, pullSecret)
	}
	eventually(ctx, t, "the reader reads the seed object", func() error {
		if out := podLog(ctx, t, reader); !strings.HasPrefix(out, "seed") {
			return fmt.Errorf("it read %q", out)
		}
		return nil
	})

	// A wrong credential, and an image the node does not hold yet.
	setPullSecret(ctx, t, "wrong-password")
	if err := cfg.InstallChart(ctx, logf, "--set", "image.repositories.mounter="+repo, "--set", "image.tags.mounter="+bad,
		"--set-json", fmt.Sprintf("mountpointPod.imagePullSecrets=[%q]", pullSecret)); err != nil {
		t.Fatalf("upgrade to the second tag: %v", err)
	}
	staticClaim(ctx, t, ns, "other")
	refused := busybox(ns, "refused", "sleep 3600", claimVolume("other", "other"))
	create(ctx, t, refused)
	eventually(ctx, t, "a FailedMount Event on the workload naming the pull Secret", func() error {
		events := podEvents(ctx, refused)
		if !strings.Contains(events, "FailedMount") || !strings.Contains(events, "the Secrets "+pullSecret+" of namespace "+mountpointNamespace) {
			return fmt.Errorf("events: %s", events)
		}
		return nil
	})
}

// setPullSecret creates or replaces the pull Secret of the Mountpoint namespace, with the
// private registry's user and the given password.
func setPullSecret(ctx context.Context, t *testing.T, password string) {
	t.Helper()
	cred := cluster.RegistryUser + ":" + password
	config, err := json.Marshal(map[string]any{"auths": map[string]any{cfg.RegistryHost(): map[string]string{
		"username": cluster.RegistryUser, "password": password, "auth": base64.StdEncoding.EncodeToString([]byte(cred)),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: mountpointNamespace, Name: pullSecret},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: config},
	}
	err = k8s.Create(ctx, secret)
	if apierrors.IsAlreadyExists(err) {
		err = k8s.Update(ctx, secret)
	}
	if err != nil {
		t.Fatalf("create or replace the pull Secret: %v", err)
	}
}
