#!/usr/bin/env bash
# make demo: on the running single-node cluster (make cluster-up), install the chart and show
# s3csi at work: a dynamically provisioned bucket shared by two pods through one Mountpoint Pod,
# a static volume on an existing bucket, and what a user looks at afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=bin/s3csi-cluster
eval "$($cluster env)"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; "$@"; }

step "Install the chart from the cluster's registry (helm upgrade --install s3csi oci://127.0.0.1:5000/s3csi/charts/s3csi)"
$cluster install

step "A bucket that already exists, for the static volume"
$cluster make-bucket s3csi-demo-static existing.txt "this object was in the bucket before the volume existed
"

step "A StorageClass, a claim (one bucket per claim) and a static PersistentVolume"
# Pods are replaced on every run, so each run shows a fresh mount.
kubectl delete pod -n s3csi-demo --all --ignore-not-found --wait=true >/dev/null 2>&1 || true
show kubectl apply -f deploy/demo/demo.yaml
kubectl wait -n s3csi-demo pvc/shared pvc/static --for=jsonpath='{.status.phase}'=Bound --timeout=2m >/dev/null
show kubectl get pvc -n s3csi-demo

step "Two pods on the same claim, and one on the static volume"
show kubectl apply -f deploy/demo/pods.yaml
kubectl wait -n s3csi-demo pod/writer pod/reader pod/static --for=condition=Ready --timeout=3m >/dev/null
show kubectl get pods -n s3csi-demo -o wide

step "What the pods see"
for _ in $(seq 50); do kubectl logs -n s3csi-demo reader | grep -q '^read' && break; sleep 0.2; done
show kubectl logs -n s3csi-demo writer
show kubectl logs -n s3csi-demo reader
show kubectl logs -n s3csi-demo static

step "The object in S3 (versitygw keeps each object as a file)"
bucket=$(kubectl get pv "$(kubectl get pvc -n s3csi-demo shared -o jsonpath='{.spec.volumeName}')" -o jsonpath='{.spec.csi.volumeHandle}')
show ls -l "$S3CSI_S3_DATA_DIR/$bucket"

step "One Mountpoint Pod serves both pods of the claim"
show kubectl get s3pa
show kubectl get pods -n mount-s3 -o wide

step "The events of the mount path: the workloads', then the Mountpoint Pods'"
show kubectl get events -n s3csi-demo --sort-by=.lastTimestamp
show kubectl get events -n mount-s3 --sort-by=.lastTimestamp

cat <<MSG

The cluster keeps running. To use it:
  eval "\$($cluster env)"        # KUBECONFIG and this cluster's kubectl on PATH
  kubectl exec -n s3csi-demo writer -- sh -c 'date > /data/now.txt'
  kubectl exec -n s3csi-demo reader -- ls -l /data
  kubectl logs -n mount-s3 -l app.kubernetes.io/component=mountpoint
  kubectl describe s3pa
Stop it, and restore the host, with: make cluster-down
MSG
