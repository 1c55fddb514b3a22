package source

import (
	"fmt"

	"github.com/s3csi/s3csi/shared/mount"
)

// StaleMessage tells a workload's owner that its containers hold a dead mount of Mountpoint Pod
// mp although the volume was mounted again.
func StaleMessage(namespace, mp string) string {
	what := "The S3 filesystem this pod's containers mounted"
	if mp != "" {
		what += fmt.Sprintf(" (Mountpoint Pod %s/%s)", namespace, mp)
	}
	return what + " stopped and was mounted again, but containers started before still hold the dead mount " +
		"(transport endpoint is not connected); restart this pod"
}

// DeadMessage tells a workload's owner that the filesystem of Mountpoint Pod mp (in namespace)
// died and what to do; cause, when known, says how it ended (": the mounter was OOM-killed").
func DeadMessage(namespace, mp, cause string) string {
	if mp == "" {
		return "The S3 filesystem of this volume stopped (transport endpoint is not connected); restart the pod to mount the volume again, " +
			"and see the logs of the Mountpoint Pods in namespace " + namespace
	}
	return fmt.Sprintf("The S3 filesystem served by Mountpoint Pod %s/%s stopped (transport endpoint is not connected)%s; "+
		"restart this pod to mount the volume again, and see kubectl logs -n %s %s --previous", namespace, mp, cause, namespace, mp)
}

// HungMessage tells a workload's owner that the filesystem of Mountpoint Pod mp does not answer.
func HungMessage(namespace, mp string) string {
	if mp == "" {
		return fmt.Sprintf("The S3 filesystem of this volume does not answer within %s (its Mountpoint Pod is stopped or stuck); "+
			"see the logs of the Mountpoint Pods in namespace %s", mount.ProbeTimeout, namespace)
	}
	return fmt.Sprintf("The S3 filesystem served by Mountpoint Pod %s/%s does not answer within %s (stopped or stuck); "+
		"see kubectl logs -n %s %s and kubectl describe pod -n %s %s", namespace, mp, mount.ProbeTimeout, namespace, mp, namespace, mp)
}
