//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"
)

// A workload's shell writes files through redirections whose commands run child processes, as
// scripts do every day: under kubelet, each file is stored whole. The children's exits close
// the descriptor before the shell is done; only the opener's close may complete the file, which
// needs the workload's pids in the node-agent's pid namespace (the chart runs it with hostPID).
func TestShellRedirectionsWithChildrenStoreWholeFiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := namespace(t, "writes")
	pv := staticClaim(ctx, t, ns, "data")
	writer := busybox(ns, "writer", `set -e
cd /data
{ echo a; sh -c 'echo b'; echo c; } > group.txt
sh -c 'echo a; sh -c "echo b"; echo c' > child.txt
for f in 1 2 3; do sh -c "echo part$f"; done > loop.txt
cat group.txt child.txt loop.txt`, claimVolume("data", "data"))
	create(ctx, t, writer)
	log := waitPodDone(ctx, t, writer)
	for key, want := range map[string]string{
		"group.txt": "a\nb\nc\n",
		"child.txt": "a\nb\nc\n",
		"loop.txt":  "part1\npart2\npart3\n",
	} {
		if got := object(ctx, t, bucketOf(pv), key); got != want {
			t.Errorf("object %s = %q, want %q; the pod's log:\n%s", key, got, want, log)
		}
	}
}
