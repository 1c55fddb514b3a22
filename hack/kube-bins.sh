#!/usr/bin/env bash
# Builds Kubernetes binaries and etcd from the Go module proxy into a cache dir outside the
# repository, each once per version, and prints the directory. Arguments name the binaries wanted
# (default: the cluster's seven): kube-apiserver kubelet kube-scheduler kube-controller-manager
# kube-proxy kubectl etcd; also known are e2e.test (Kubernetes' e2e suite, for its External Storage
# tests), ginkgo (the runner that runs it in parallel, at the version the suite links) and agnhost
# (the suite's test image program). envtest needs kube-apiserver and etcd; the
# single-node cluster needs the seven.
#
# Kubernetes is built through a throwaway module that requires k8s.io/kubernetes and maps every
# staging module the way kubernetes' own go.mod does, to the published v0.Y.Z release. The version
# is linked in, or Helm and version checks see v0.0.0-master.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.34.4}
ETCD_VERSION=${ETCD_VERSION:-v3.6.5}
CACHE_DIR=${S3CSI_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/s3csi}
dest="$CACHE_DIR/kube/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"

all=(kube-apiserver kubelet kube-scheduler kube-controller-manager kube-proxy kubectl etcd)
want=("$@")
[ ${#want[@]} -gt 0 ] || want=("${all[@]}")

kube_pkgs=()
need_etcd=false
need_e2e=false
for b in "${want[@]}"; do
  [ -x "$dest/$b" ] && continue
  case "$b" in
    etcd) need_etcd=true ;;
    kubectl) kube_pkgs+=(k8s.io/kubernetes/cmd/kubectl) ;;
    kube-apiserver|kubelet|kube-scheduler|kube-controller-manager|kube-proxy) kube_pkgs+=("k8s.io/kubernetes/cmd/$b") ;;
    agnhost) kube_pkgs+=(k8s.io/kubernetes/test/images/agnhost) ;;
    ginkgo) kube_pkgs+=(github.com/onsi/ginkgo/v2/ginkgo) ;;
    e2e.test) need_e2e=true ;;
    *) echo "kube-bins: unknown binary $b (known: ${all[*]} e2e.test ginkgo agnhost)" >&2; exit 2 ;;
  esac
done
if [ ${#kube_pkgs[@]} -eq 0 ] && ! $need_etcd && ! $need_e2e; then
  echo "$dest"
  exit 0
fi

mkdir -p "$dest"
export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
staging_version="v0.${K8S_VERSION#v1.}"

if [ ${#kube_pkgs[@]} -gt 0 ] || $need_e2e; then
  (
    mkdir "$work/kube" && cd "$work/kube"
    gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
    {
      echo "module s3csi.local/kube-bins"
      echo
      echo "go 1.25"
      echo
      echo "require k8s.io/kubernetes $K8S_VERSION"
      echo
      sed -n 's#^[[:space:]]*\(replace[[:space:]]\+\)\{0,1\}\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/[a-z0-9-]*$#replace \2 => \2 '"$staging_version"'#p' "$gomod"
    } > go.mod
    ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
    ldflags="$ldflags -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
    ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
    ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
    mkdir out
    if [ ${#kube_pkgs[@]} -gt 0 ]; then
      go build -trimpath -ldflags "$ldflags" -o out/ "${kube_pkgs[@]}"
    fi
    if $need_e2e; then
      # The suite is the test binary of package test/e2e; its test-only requirements join the
      # throwaway module's graph through -mod=mod. go test's vet pass would compute vet facts for
      # all of Kubernetes (minutes of CPU) to check code that is not ours.
      go test -c -vet=off -trimpath -ldflags "$ldflags" -o out/e2e.test k8s.io/kubernetes/test/e2e
    fi
    mv out/* "$dest/"
  )
fi

if $need_etcd; then
  (
    mkdir "$work/etcd" && cd "$work/etcd"
    cat > go.mod <<MOD
module s3csi.local/kube-bins-etcd

go 1.25

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
    cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
    go build -trimpath -ldflags "-s -w" -o "$dest/etcd.tmp" .
    mv "$dest/etcd.tmp" "$dest/etcd"
  )
fi
echo "$dest"
