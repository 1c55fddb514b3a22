#!/usr/bin/env bash
# Loads every image tarball given as an argument into a private containerd (ctr images import,
# unpacked into its overlayfs snapshotter) and a private podman store (podman load), and checks
# that each comes out named docker.io/s3csi/<name>:<tag>, the name kubelet asks for. Nothing here
# touches the default containerd socket or podman store; both are started in a temp dir and stopped.
set -o errexit -o nounset -o pipefail

[ $# -gt 0 ] || { echo "usage: $0 IMAGE.tar..." >&2; exit 2; }
command -v containerd >/dev/null && command -v ctr >/dev/null \
  || { echo "needs Debian's containerd: apt-get install -y containerd" >&2; exit 1; }
command -v podman >/dev/null || { echo "needs Debian's podman: apt-get install -y podman" >&2; exit 1; }

tmp=$(mktemp -d /var/tmp/s3csi-images-verify.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  podman --root "$tmp/podman/root" --runroot "$tmp/podman/run" --storage-driver vfs system reset -f >/dev/null 2>&1 || true
  umount -R "$tmp/containerd/root" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

mkdir -p "$tmp/containerd"
cat > "$tmp/containerd/config.toml" <<TOML
version = 2
root = "$tmp/containerd/root"
state = "$tmp/containerd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$tmp/containerd/c.sock"
[ttrpc]
  address = "$tmp/containerd/c.sock.ttrpc"
TOML
containerd --config "$tmp/containerd/config.toml" >"$tmp/containerd/log" 2>&1 &
pid=$!
ctr=(ctr --address "$tmp/containerd/c.sock" -n k8s.io)
for _ in $(seq 100); do "${ctr[@]}" version >/dev/null 2>&1 && break; sleep 0.1; done
"${ctr[@]}" version >/dev/null || { cat "$tmp/containerd/log" >&2; exit 1; }

podman=(podman --root "$tmp/podman/root" --runroot "$tmp/podman/run" --storage-driver vfs)
fail=0
for tar in "$@"; do
  base=$(basename "$tar" .tar)           # s3csi-<name>-<tag>
  tag=${base##*-}
  name=${base%-"$tag"}; name=${name#s3csi-}
  want="docker.io/s3csi/$name:$tag"
  "${ctr[@]}" images import "$tar" >/dev/null
  # The list is read whole first: `grep -q` in a pipe would close it early and, with pipefail,
  # turn ctr's SIGPIPE into a failure.
  names=$("${ctr[@]}" images ls -q)
  if grep -qx "$want" <<<"$names"; then
    echo "ctr    ok  $want"
  else
    echo "ctr    FAIL $want not among: $(tr '\n' ' ' <<<"$names")"; fail=1
  fi
  "${podman[@]}" load -q -i "$tar" >/dev/null
  if "${podman[@]}" image exists "$want"; then
    echo "podman ok  $want"
  else
    echo "podman FAIL $want not among: $("${podman[@]}" images --format '{{.Repository}}:{{.Tag}}' | tr '\n' ' ')"; fail=1
  fi
done
# Run the busybox image, if given, as a container: its shell, applets, user and /tmp work.
for tar in "$@"; do
  case $(basename "$tar") in s3csi-busybox-*) ;; *) continue ;; esac
  ref="docker.io/s3csi/busybox:$(basename "$tar" .tar | sed 's/.*-//')"
  out=$("${ctr[@]}" run --rm "$ref" s3csi-verify /bin/sh -c 'id -u; stat -c %a /tmp; ls /bin/sh' 2>&1) || true
  if [ "$out" = "$(printf '0\n1777\n/bin/sh')" ]; then
    echo "ctr run ok  $ref"
  else
    echo "ctr run FAIL $ref: $out"; fail=1
  fi
done
# Run the third-party programs, if given, with their version flag: each must start in its image.
for tar in "$@"; do
  base=$(basename "$tar" .tar); tag=${base##*-}
  case $base in
    s3csi-nats-*) ref="docker.io/s3csi/nats:$tag" args=(/nats-server --version) ;;
    s3csi-csi-provisioner-*) ref="docker.io/s3csi/csi-provisioner:$tag" args=(/csi-provisioner --version) ;;
    s3csi-coredns-*) ref="docker.io/s3csi/coredns:$tag" args=(/coredns -version) ;;
    *) continue ;;
  esac
  if out=$("${ctr[@]}" run --rm "$ref" s3csi-verify-version "${args[@]}" 2>&1); then
    echo "ctr run ok  $ref: $(head -1 <<<"$out")"
  else
    echo "ctr run FAIL $ref: $out"; fail=1
  fi
done

# Run the pause image, if given: it must keep running until SIGTERM, then exit 0.
for tar in "$@"; do
  case $(basename "$tar") in s3csi-pause-*) ;; *) continue ;; esac
  ref="docker.io/s3csi/pause:$(basename "$tar" .tar | sed 's/.*-//')"
  "${ctr[@]}" run --rm "$ref" s3csi-verify-pause & run=$!
  sleep 1
  status="exited before SIGTERM"
  if kill -0 "$run" 2>/dev/null; then
    "${ctr[@]}" task kill -s SIGTERM s3csi-verify-pause
    for _ in $(seq 100); do kill -0 "$run" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$run" 2>/dev/null; then
      "${ctr[@]}" task kill -s SIGKILL s3csi-verify-pause
      wait "$run" || true
      status="still running 10 s after SIGTERM"
    else
      wait "$run" && status=0 || status=$?
    fi
  else
    wait "$run" || true
  fi
  if [ "$status" = 0 ]; then
    echo "ctr run ok  $ref (exit 0 on SIGTERM)"
  else
    echo "ctr run FAIL $ref: $status"; fail=1
  fi
done
exit "$fail"
