// Command s3csi-pause is the sandbox ("pause") container of the project's single-node test
// cluster (image s3csi/pause:3.10): it holds a pod's namespaces open, sleeps until SIGINT or
// SIGTERM and then exits 0, and reaps zombie children on SIGCHLD, which matters when it is PID 1
// of a pod that shares its process namespace.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 {
		_, _ = fmt.Fprintln(os.Stderr, "s3csi-pause: takes no arguments")
		os.Exit(2)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every child that has exited, without blocking.
//
// Problem: signals coalesce, so one SIGCHLD may stand for several exited children.
// Solution: wait for any child with WNOHANG until none is left to collect.
// Invariant: after reap returns, no child that had exited before the call remains a zombie.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
