#!/usr/bin/env bash
# Builds Kubernetes binaries and etcd from the Go module proxy into a cache dir outside the
# repository, each once per version, and prints the directory. Arguments name the binaries wanted
# (default: the cluster's seven): kube-apiserver kubelet kube-scheduler kube-controller-manager
# kube-proxy kubectl etcd; also known are e2e.test (Kubernetes' e2e suite built with its External
# Storage tests only), ginkgo (the runner that runs it in parallel, at the version the suite links)
# and agnhost (the suite's test image program). envtest needs kube-apiserver and etcd; the
# single-node cluster needs the seven.
#
# Kubernetes is built through a throwaway module that requires k8s.io/kubernetes and every staging
# module at its published v0.Y.Z release (kubernetes' own go.mod requires them at v0.0.0, replaced
# by ./staging). The version is linked in, or Helm and version checks see v0.0.0-master.
#
# Each throwaway module (Kubernetes', etcd's) is raised to the versions s3csi's workspace selects
# for the modules of one library both build on: client-go's closure for Kubernetes (x/net, x/sys,
# protobuf, klog, the k8s.io staging modules' selected version...), gRPC's for etcd. With the same
# versions and flags (static, -trimpath), a package compiles to one Go build cache entry whether a
# product image, a test harness or kube-apiserver asks for it: on a cold cache, client-go and its
# closure compile once instead of once more for Kubernetes. Only these libraries are raised:
# they keep their APIs across minor releases, where others do not (the CSI spec s3csi uses is newer
# than the one kubelet builds with, and does not compile with it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

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
# The versions s3csi's modules build with (all alike: `make update` runs `go work sync`).
workspace_versions=$(cd "$root" && GOFLAGS= GOWORK="$root/go.work" go list -m -f '{{.Path}} {{.Version}}' all)
# The flags of every s3csi build that is not a race test (the Makefile's GO_RELEASE): the cache
# entries are shared only when they are equal.
export GOFLAGS="-mod=mod -trimpath -gcflags=all=-dwarf=false" GOWORK=off CGO_ENABLED=0

# align_with_workspace ROOT... raises the requirements of the module in the current directory to
# the workspace's version of every module that the packages ROOT... are built from, where the two
# select different versions; a module its go.mod requires by name (what it builds) is left alone.
# A requirement is a minimum, so a workspace version older than the one selected here changes
# nothing. A staging module (k8s.io/api...) is selected at v0.0.0 and replaced by its release: it
# compiles under the selected version, so it too is required at the workspace's release (the same
# one) to share the cache entry.
align_with_workspace() {
  local edits=() direct closure
  direct=$(go mod edit -json | sed -n 's/^[[:space:]]*"Path": "\(.*\)",*$/\1/p')
  closure=$(go list -deps -f '{{with .Module}}{{.Path}}{{end}}' "$@" | sort -u)
  while read -r path version; do
    grep -qxF "$path" <<< "$direct" && continue
    grep -qxF "$path" <<< "$closure" || continue
    edits+=("-require=$path@$version")
  done < <(join <(go list -m -f '{{.Path}} {{.Version}}' all | sort) <(sort <<< "$workspace_versions") | awk '$2 != $3 {print $1, $3}')
  [ ${#edits[@]} -eq 0 ] || go mod edit "${edits[@]}"
}
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
    align_with_workspace k8s.io/client-go/kubernetes
    ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
    ldflags="$ldflags -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
    ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
    ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
    mkdir out
    if [ ${#kube_pkgs[@]} -gt 0 ]; then
      go build -ldflags "$ldflags" -o out/ "${kube_pkgs[@]}"
    fi
    if $need_e2e; then
      # The suite is a test binary of the External Storage tests alone, where Kubernetes' own
      # e2e.test links every suite (apps, network, DRA, cloud providers...): it parses the same
      # flags and runs the same specs (RunE2ETests), 682 of them instead of 7459, and builds in
      # 331 CPU-seconds instead of 387 on a cold cache, for an 82 MB binary instead of 100. Its
      # test-only requirements join the throwaway module's graph through -mod=mod; go test's vet
      # pass would compute vet facts for all of Kubernetes (minutes of CPU) to check code that is
      # not ours.
      mkdir suite
      cat > suite/suite_test.go <<'GO'
package suite

import (
	"flag"
	"os"
	"testing"

	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	manifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	"k8s.io/kubernetes/test/fixtures"

	_ "k8s.io/kubernetes/test/e2e/feature"
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/e2e/storage/external"
	_ "k8s.io/kubernetes/test/utils/format"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	testfiles.AddFileSource(manifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(fixtures.GetTestFixturesFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	if framework.TestContext.RepoRoot != "" {
		testfiles.AddFileSource(testfiles.RootFileSource{Root: framework.TestContext.RepoRoot})
	}
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) { e2e.RunE2ETests(t) }
GO
      go test -c -vet=off -ldflags "$ldflags" -o out/e2e.test ./suite
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
    align_with_workspace google.golang.org/grpc
    go build -ldflags "-s -w" -o "$dest/etcd.tmp" .
    mv "$dest/etcd.tmp" "$dest/etcd"
  )
fi
echo "$dest"
