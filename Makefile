# s3csi: run `make` (or `make help`) for the targets.
.DEFAULT_GOAL := help
SHELL := /usr/bin/env bash -o pipefail -o errexit -o nounset

VERSION ?= $(shell sed -n 's/^appVersion: "\(.*\)"/\1/p' charts/s3csi/Chart.yaml)
# Every binary reports VERSION (GetPluginInfo, labels, the mounter's user agent): shared/version.
LDFLAGS  := -X github.com/s3csi/s3csi/shared/version.Version=$(VERSION)

MODULES  := shared cli services/csi-controller services/pod-reconciler services/node-agent services/mounter services/janitor \
            integration hack/imagebuild hack/tools/coredns
BIN      := $(CURDIR)/bin
CLUSTER  := $(BIN)/s3csi-cluster
GO       ?= go
# No build emits DWARF debug information: no test, image or tool reads it (stack traces and the
# race detector use the symbol table), and leaving it out costs a tenth less compile CPU and a
# third less link CPU on a cold cache. Build with GO_NODWARF= to debug with a debugger.
GO_NODWARF ?= -gcflags=all=-dwarf=false -ldflags=-w
# Tests run each module on its own (GOWORK=off) so every go.mod is proven complete; the build
# tooling under hack/ runs without -race (a race build of CoreDNS costs minutes and tests nothing
# of the product). go test's own vet pass is off: it computes vet facts for every dependency (minutes
# of CPU on a cold cache), and `make lint` runs govet with every analyzer on the same code.
GOTEST_FLAGS ?= -race -count=1 -timeout=20m -vet=off $(GO_NODWARF)
# Every build that is not a race test is made as the images' binaries are: on its module alone,
# static and with -trimpath. The Go build cache then holds one compiled copy of each package for
# the images, the binaries tests build and run (shared/testenv.GoBuild), the tools, the cluster
# harness, the e2e suite and lint, instead of one per set of flags (-race, which needs cgo, has
# its own).
GO_RELEASE := GOWORK=off CGO_ENABLED=0 GOFLAGS="-trimpath $(GO_NODWARF)"

# Pinned tools: each lives in a module of its own under hack/tools so that its dependencies never
# move the driver's. `make tools` builds them into bin/.
CONTROLLER_GEN := $(BIN)/controller-gen
PROTOC_GEN_GO  := $(BIN)/protoc-gen-go
BUF            := $(BIN)/buf
GOLANGCI_LINT  := $(BIN)/golangci-lint
VERSITYGW      := $(BIN)/versitygw
HELM           := $(BIN)/helm
TOOLS := $(CONTROLLER_GEN) $(PROTOC_GEN_GO) $(BUF) $(GOLANGCI_LINT) $(VERSITYGW) $(HELM)

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} \
	  /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Develop

.PHONY: build
# Every command goes to bin/: without -o, `go build ./...` in a module that is one main package
# (hack/tools/coredns) writes the executable into the module's directory, in the work tree. A
# module without a command is built without -o (go refuses `-o DIR/` with no main package).
build: ## Compile every module (GOWORK=off) and put every command (services, kubectl-s3csi, tools) into bin/, stamped with VERSION.
	@for m in $(MODULES); do echo "== build $$m"; (cd $$m && \
	  if [ -n "$$($(GO_RELEASE) $(GO) list -f '{{if eq .Name "main"}}main{{end}}' ./...)" ]; then out=-o=$(BIN)/; else out=; fi && \
	  $(GO_RELEASE) $(GO) build -ldflags "$(LDFLAGS)" $$out ./...); done

.PHONY: test
# What the container and e2e suites need (host packages, Kubernetes binaries, images: about 20
# minutes on a fresh machine) is built at a low CPU priority (nice 10) while the module tests
# run, taking mostly the CPU they leave idle; its log is bin/e2e-prep.log. The container suite,
# then the e2e suite, start once both are done.
test: envtest-bins ## Run every module's tests, the services as containers, then the e2e suite on the single-node cluster.
	@mkdir -p $(BIN) && rm -f $(BIN)/e2e-prep.rc
	@{ nice -n 10 $(MAKE) --no-print-directory e2e-prep > $(BIN)/e2e-prep.log 2>&1; echo $$? > $(BIN)/e2e-prep.rc; } & \
	  status=0; $(MAKE) --no-print-directory test-modules || status=$$?; \
	  echo "== waiting for the binaries and images of the container and e2e suites (log: $(BIN)/e2e-prep.log)"; wait; \
	  [ $$status = 0 ] || exit $$status; \
	  [ "$$(cat $(BIN)/e2e-prep.rc)" = 0 ] || { echo "building what the e2e suite needs failed; the end of $(BIN)/e2e-prep.log:"; \
	    tail -n 40 $(BIN)/e2e-prep.log; exit 1; }
	@$(MAKE) --no-print-directory test-containers
	@$(MAKE) --no-print-directory test-e2e

.PHONY: e2e-prep
e2e-prep: cluster-deps podman-deps cluster-bins e2e-upstream-bins images images-release chart $(CLUSTER) ## Build what the container and e2e suites need: host packages, Kubernetes binaries, images (cached).

.PHONY: test-containers
test-containers: tools-test envtest-bins podman-deps images-product ## Run the services and NATS as containers under Podman (integration/containers).
	cd integration && GOWORK=off $(GO) test $(GOTEST_FLAGS) -tags=containers ./containers/

.PHONY: test-modules
test-modules: tools-test envtest-bins test-deps ## Run every module's tests against the real API server, NATS, S3 and FUSE.
	@for m in $(MODULES); do echo "== test $$m"; \
	  case $$m in hack/*) (cd $$m && $(GO_RELEASE) $(GO) test -vet=off -count=1 -timeout=20m ./...);; \
	  *) (cd $$m && GOWORK=off $(GO) test $(GOTEST_FLAGS) ./...);; esac; done

.PHONY: test-e2e
test-e2e: $(CLUSTER) ## Run the e2e suite; a cluster this target starts is stopped after, a running one is kept.
	@if $(CLUSTER) status >/dev/null 2>&1; then $(MAKE) --no-print-directory e2e; \
	else status=0; $(MAKE) --no-print-directory e2e || status=$$?; $(CLUSTER) down; exit $$status; fi

.PHONY: bench
bench: tools-test envtest-bins bench-deps $(CLUSTER) ## Run every benchmark (each module's, then pod start on the cluster); prints one markdown table, kept in bin/bench.md.
	@mkdir -p $(BIN)
	@{ for m in $(MODULES); do echo "== bench $$m"; \
	  (cd $$m && $(GO_RELEASE) $(GO) test -vet=off -run='^$$' -bench=. -benchmem -timeout=60m ./...) || echo "FAIL $$m"; done; \
	  $(MAKE) --no-print-directory bench-cluster || echo "FAIL bench-cluster"; } 2>&1 | tee $(BIN)/bench.txt
	@cd integration && $(GO_RELEASE) $(GO) run ./cmd/s3csi-benchtable < $(BIN)/bench.txt | tee $(BIN)/bench.md

.PHONY: bench-cluster
bench-cluster: $(CLUSTER) ## Pod start and a burst of pods on the cluster (started and stopped if not running).
	@if $(CLUSTER) status >/dev/null 2>&1; then $(MAKE) --no-print-directory bench-cluster-run; \
	else status=0; $(MAKE) --no-print-directory bench-cluster-run || status=$$?; $(CLUSTER) down; exit $$status; fi

.PHONY: bench-cluster-run
bench-cluster-run: cluster-up
	cd integration && $(GO_RELEASE) $(GO) test -vet=off -count=1 -tags=e2e -run='^$$' -bench=. -benchtime=1x -timeout=60m ./e2e/

.PHONY: run
run: tools-test envtest-bins ## Bring up the local stack (API server, NATS, S3) and print how to reach it.
	$(GO) run ./integration/cmd/s3csi-devstack

##@ Cluster (a real single-node Kubernetes on this machine; root)


.PHONY: demo
demo: cluster-up ## Start the cluster, install the chart and show a bucket mounted into two pods.
	hack/demo.sh

.PHONY: e2e
e2e: e2e-upstream-bins podman-deps cluster-up ## Run the end-to-end suite on the cluster (started if needed), Kubernetes' storage tests included.
	cd integration && $(GO_RELEASE) $(GO) test -vet=off -count=1 -timeout=80m -tags=e2e ./e2e/...

.PHONY: cluster-up
cluster-up: cluster-deps cluster-bins tools-test images images-release chart $(CLUSTER) ## Start the cluster (or reuse the running one), load its own images and push the product's images and chart to its registry.
	$(CLUSTER) up
	$(CLUSTER) load-images
	$(CLUSTER) push

.PHONY: cluster-down
cluster-down: $(CLUSTER) ## Stop the cluster and restore the host.
	$(CLUSTER) down

.PHONY: cluster-bins
cluster-bins: ## Build the cluster's Kubernetes binaries from source into ~/.cache/s3csi (once).
	@hack/kube-bins.sh >/dev/null

.PHONY: cluster-deps
cluster-deps: ## Install the host packages the cluster runs (containerd, runc, CNI plugins, iptables, static busybox).
	@command -v containerd >/dev/null && command -v runc >/dev/null && command -v iptables >/dev/null \
	  && command -v conntrack >/dev/null && [ -x /usr/lib/cni/bridge ] && [ -x /bin/busybox ] || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containerd runc containernetworking-plugins iptables conntrack busybox-static; }

$(CLUSTER): $(shell find integration/cluster integration/cmd/s3csi-cluster -name '*.go' 2>/dev/null) integration/go.mod
	cd integration && $(GO_RELEASE) $(GO) build -o $(BIN)/ ./cmd/s3csi-cluster

.PHONY: lint
lint: lint-go lint-chart ## Run golangci-lint in every module and helm lint on the chart.

.PHONY: lint-go
# golangci-lint spends a third of its CPU collecting garbage at Go's default GOGC=100: with 400 a
# cold run on services/pod-reconciler takes 88 CPU-s instead of 132, for 3.5 GB of peak memory
# instead of 2.3 (the compiler and the go command gain nothing from it).
LINT_GOGC := 400
lint-go: $(GOLANGCI_LINT) ## Run golangci-lint in every module (on the code as the images build it: static, -trimpath).
	@for m in $(MODULES); do echo "== lint $$m"; (cd $$m && $(GO_RELEASE) GOGC=$(LINT_GOGC) $(GOLANGCI_LINT) run ./...); done

.PHONY: lint-chart
lint-chart: $(HELM) ## Run helm lint on charts/s3csi with every values file of charts/s3csi/ci.
	@for f in charts/s3csi/ci/*-values.yaml; do echo "== helm lint $$f"; $(HELM) lint --strict charts/s3csi -f $$f; done

.PHONY: update
# The modules of the linter, versitygw and the CSI provisioner are not tidied: they hold `tool`
# directives pinned with `go get -tool`, and tidying them would fetch the tools' own test
# dependencies, some of which the proxy refuses (those of controller-gen, Helm and CoreDNS it
# serves, so the three are tidied after their alignment below).
# `go work sync` gives every module of go.work the versions the workspace selects, so all modules
# compile the same dependency versions and the Go build cache holds one copy of client-go and its
# closure per set of flags instead of one per module (on a cold cache, minutes of CPU each). The
# tools built on Kubernetes' libraries are aligned with one another the same way, through a
# workspace of their own: not with the driver (its Kubernetes is the cluster's, older) nor with the
# CSI provisioner (a part of the product, built with the versions it was released with).
K8S_TOOL_MODULES := hack/tools hack/tools/helm hack/tools/coredns
update: generate $(GOLANGCI_LINT) ## Run every generator and formatter, align and tidy every module.
	$(GO) work sync
	@ws=$$(mktemp -d) && trap 'rm -rf "$$ws"' EXIT && \
	  GOWORK=$$ws/go.work $(GO) work init $(addprefix $(CURDIR)/,$(K8S_TOOL_MODULES)) && \
	  GOWORK=$$ws/go.work $(GO) work sync
	@for m in $(K8S_TOOL_MODULES); do (cd $$m && GOWORK=off $(GO) mod tidy); done
	@for m in $(MODULES); do (cd $$m && GOWORK=off $(GO) mod tidy && GOWORK=off $(GOLANGCI_LINT) fmt ./...); done

.PHONY: generate
generate: $(CONTROLLER_GEN) $(BUF) $(PROTOC_GEN_GO) ## Generate deepcopy, the CRD (charts/s3csi/crds, embedded in shared/api/v2 for the janitor), the event protos and the chart's NATS users.
	cd shared && $(CONTROLLER_GEN) object paths=./api/... \
	  crd:crdVersions=v1 output:crd:artifacts:config=../charts/s3csi/crds
	cp charts/s3csi/crds/s3.csi.scality.com_mountpoints3podattachments.yaml shared/api/v2/crd.yaml
	cd proto && $(BUF) lint && $(BUF) generate
	cd shared && $(GO_RELEASE) $(GO) test -count=1 -run '^TestTheChartAuthorizationIsGeneratedFromThePermissions$$' ./events -update

.PHONY: verify
verify: lint update ## Lint, then fail if `make update` changed or added any file.
	@if [ -n "$$(git status --porcelain)" ]; then \
	  echo "the tree is not clean after 'make update':"; git status --porcelain; git --no-pager diff --stat; exit 1; fi

##@ Images

# `make images` builds every image as a docker-archive tarball in bin/images/ (no container engine:
# hack/imagebuild writes one layer of static binaries on an empty base). docs/images.md lists them.
IMAGES_DIR   := $(BIN)/images
IMAGE_BIN    := $(BIN)/linux_amd64
IMAGEBUILD   := $(BIN)/imagebuild
IMAGE_SOURCE := https://github.com/s3csi/s3csi
# The Mountpoint Pod's entrypoint: the one line to change when its main moves.
MOUNTER_MAIN := services/mounter/cmd/s3csi-mounter
GIT_REVISION := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
GIT_CREATED  := $(shell git log -1 --format=%cI 2>/dev/null || echo 1970-01-01T00:00:00Z)
# Third-party versions: NATS is the one shared/go.mod requires (built from that module, so the two
# cannot drift); the CSI provisioner and CoreDNS are pinned by their modules under hack/tools.
NATS_VERSION        = $(shell sed -n 's|^[[:space:]]*github.com/nats-io/nats-server/v2 \(v[^ ]*\).*|\1|p' shared/go.mod)
PROVISIONER_VERSION = $(shell sed -n 's|^tool.*||;s|^[[:space:]]*github.com/kubernetes-csi/external-provisioner/v6 \(v[^ ]*\).*|\1|p' hack/tools/csi-provisioner/go.mod)
COREDNS_VERSION     = $(shell sed -n 's|^[[:space:]]*github.com/coredns/coredns \(v[^ ]*\).*|\1|p' hack/tools/coredns/go.mod)
BUSYBOX             := /bin/busybox
BUSYBOX_APPLETS     := ash awk basename cat chmod chown cp cut date dd df diff dirname du echo env expr \
  false find grep gzip head hostname id kill ln ls md5sum mkdir mktemp mount mv nc nslookup printf ps pwd \
  readlink rm rmdir sed seq sh sha256sum sleep sort stat sync tail tar tee test timeout touch tr true \
  umount uname uniq vi wc wget which xargs yes

# $(call IMAGE_GO,DIR[,GOARCH]): go build in DIR for linux/GOARCH (default amd64).
IMAGE_GO       = cd $(1) && $(GO_RELEASE) GOOS=linux GOARCH=$(or $(2),amd64) $(GO) build
IMAGE_LDFLAGS  := -s -w $(LDFLAGS)

# $(call image,NAME,TAG,UID,LICENSES,PACKAGED_VERSION,FLAGS[,REPOSITORY]) defines IMAGE_OUT_NAME, the
# tarball of REPOSITORY:TAG (default docker.io/s3csi/NAME), and IMAGE_ARGS_NAME, the spec
# `imagebuild build` and `check` take.
define image
IMAGE_OUT_$(1)  = $(IMAGES_DIR)/s3csi-$(1)-$(2).tar
IMAGE_ARGS_$(1) = -ref $(or $(7),docker.io/s3csi/$(1)):$(2) -user $(3) -created $(GIT_CREATED) -dir /tmp=1777 \
  -label org.opencontainers.image.title=$(or $(7),s3csi/$(1)) -label org.opencontainers.image.version=$(5) \
  -label org.opencontainers.image.source=$(IMAGE_SOURCE) -label org.opencontainers.image.revision=$(GIT_REVISION) \
  -label org.opencontainers.image.created=$(GIT_CREATED) -label org.opencontainers.image.licenses=$(4) $(6)
endef
bin_flags = -file /$(1)=$(IMAGE_BIN)/$(1) -entrypoint /$(1)
$(eval $(call image,controller,$(VERSION),65532,Apache-2.0,$(VERSION),$(call bin_flags,s3csi-controller)))
$(eval $(call image,pod-reconciler,$(VERSION),65532,Apache-2.0,$(VERSION),$(call bin_flags,s3csi-pod-reconciler)))
$(eval $(call image,node-agent,$(VERSION),0,Apache-2.0,$(VERSION),$(call bin_flags,s3csi-node-agent)))
$(eval $(call image,janitor,$(VERSION),65532,Apache-2.0,$(VERSION),$(call bin_flags,s3csi-janitor)))
$(eval $(call image,mounter,$(VERSION),65534,Apache-2.0,$(VERSION),$(call bin_flags,s3csi-mounter)))
$(eval $(call image,nats,$(VERSION),65532,Apache-2.0,$(NATS_VERSION),$(call bin_flags,nats-server)))
$(eval $(call image,csi-provisioner,$(VERSION),65532,Apache-2.0,$(PROVISIONER_VERSION),$(call bin_flags,csi-provisioner)))
$(eval $(call image,pause,3.10,65532,Apache-2.0,$(VERSION),-file /pause=$(IMAGE_BIN)/s3csi-pause -entrypoint /pause))
$(eval $(call image,coredns,1.15.0,0,Apache-2.0,$(COREDNS_VERSION),$(call bin_flags,coredns)))
BUSYBOX_FILES := -file /bin/busybox=$(BUSYBOX) $(foreach a,$(BUSYBOX_APPLETS),-symlink /bin/$(a)=busybox)
$(eval $(call image,busybox,1.35,0,GPL-2.0-only,1.35.0,$(BUSYBOX_FILES) -entrypoint /bin/sh))
# Kubernetes' e2e suite runs its test images by their upstream names (test/utils/image/manifest.go
# of v1.34.4); no registry is reachable, so they are built here: busybox from Debian's static
# busybox, agnhost from Kubernetes' source (hack/kube-bins.sh), jessie-dnsutils (a shell and
# coreutils for the multi-volume tests) as busybox. Like upstream, busybox has no entrypoint.
# They link every applet of busybox, as upstream's busybox does (the suite's host-exec pods need
# nsenter, for one).
# The applet list is read from busybox when a recipe uses it (a deferred variable, passed as
# $$(...)), after cluster-deps has installed busybox, not when make starts.
E2E_REGISTRY      := registry.k8s.io/e2e-test-images
E2E_BUSYBOX_FILES  = -file /bin/busybox=$(BUSYBOX) \
  $(foreach a,$(filter-out busybox [ [[,$(shell $(BUSYBOX) --list 2>/dev/null)),-symlink /bin/$(a)=busybox)
$(eval $(call image,e2e-busybox,1.37.0-1,0,GPL-2.0-only,1.35.0,$$(E2E_BUSYBOX_FILES) -cmd /bin/sh,$(E2E_REGISTRY)/busybox))
$(eval $(call image,e2e-jessie-dnsutils,1.7,0,GPL-2.0-only,1.35.0,$$(E2E_BUSYBOX_FILES) -cmd /bin/sh,$(E2E_REGISTRY)/jessie-dnsutils))
AGNHOST_LICENSES := 'Apache-2.0 AND GPL-2.0-only'
$(eval $(call image,e2e-agnhost,2.56,0,$(AGNHOST_LICENSES),2.56,$$(E2E_BUSYBOX_FILES) \
  -file /agnhost=$$$${kube_bins}/agnhost -entrypoint /agnhost -cmd pause,$(E2E_REGISTRY)/agnhost))
PRODUCT_IMAGES := controller pod-reconciler node-agent janitor mounter nats csi-provisioner
CLUSTER_IMAGES := pause coredns busybox
E2E_IMAGES     := e2e-busybox e2e-jessie-dnsutils e2e-agnhost

# $(call product_bins,GOARCH,DIR): the go build commands of the product images' binaries for
# linux/GOARCH into DIR, one recipe line each (images-product and images-release share them).
define product_bins
@$(call IMAGE_GO,services/csi-controller/cmd/s3csi-controller,$(1)) -ldflags "$(IMAGE_LDFLAGS)" -o $(2)/ .
@$(call IMAGE_GO,services/pod-reconciler/cmd/s3csi-pod-reconciler,$(1)) -ldflags "$(IMAGE_LDFLAGS)" -o $(2)/ .
@$(call IMAGE_GO,services/node-agent/cmd/s3csi-node-agent,$(1)) -ldflags "$(IMAGE_LDFLAGS)" -o $(2)/ .
@$(call IMAGE_GO,services/janitor/cmd/s3csi-janitor,$(1)) -ldflags "$(IMAGE_LDFLAGS)" -o $(2)/ .
@$(call IMAGE_GO,$(MOUNTER_MAIN),$(1)) -ldflags "$(IMAGE_LDFLAGS)" -o $(2)/s3csi-mounter .
@$(call IMAGE_GO,shared,$(1)) -ldflags "-s -w" -o $(2)/ github.com/nats-io/nats-server/v2
@$(call IMAGE_GO,hack/tools/csi-provisioner,$(1)) -ldflags "-s -w -X main.version=$(PROVISIONER_VERSION)" -o $(2)/ github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner

endef

.PHONY: images
images: images-product images-cluster ## Build every image into bin/images/ (product and test cluster); cached.
	@$(IMAGEBUILD) list $(foreach n,$(PRODUCT_IMAGES) $(CLUSTER_IMAGES),$(IMAGE_OUT_$(n)))

.PHONY: images-product
images-product: $(IMAGEBUILD) ## Build the product images (the four services, mounter, NATS, CSI provisioner).
	@mkdir -p $(IMAGE_BIN) $(IMAGES_DIR)
	@echo "== go build (product binaries, VERSION=$(VERSION))"
	$(call product_bins,amd64,$(IMAGE_BIN))
	@$(foreach n,$(PRODUCT_IMAGES),$(IMAGEBUILD) build -out $(IMAGE_OUT_$(n)) $(IMAGE_ARGS_$(n)) &&) true

.PHONY: images-cluster
images-cluster: $(IMAGEBUILD) ## Build the test cluster's images (pause, CoreDNS, busybox).
	@mkdir -p $(IMAGE_BIN) $(IMAGES_DIR)
	@case "$$($(BUSYBOX) 2>&1 | head -n1)" in "BusyBox v1.35."*) true ;; *) false ;; esac \
	  && [ "$$(dpkg-query -W -f='$${Status}' busybox-static 2>/dev/null)" = "install ok installed" ] \
	  || { echo "images-cluster needs Debian's static busybox 1.35 at $(BUSYBOX): apt-get install -y busybox-static"; exit 1; }
	@echo "== go build (cluster binaries)"
	@$(call IMAGE_GO,integration/cmd/s3csi-pause) -ldflags "$(IMAGE_LDFLAGS)" -o $(IMAGE_BIN)/ .
	@$(call IMAGE_GO,hack/tools/coredns) -ldflags "-s -w" -o $(IMAGE_BIN)/coredns .
	@$(foreach n,$(CLUSTER_IMAGES),$(IMAGEBUILD) build -out $(IMAGE_OUT_$(n)) $(IMAGE_ARGS_$(n)) &&) true

.PHONY: e2e-upstream-bins
e2e-upstream-bins: cluster-deps images-cluster ## Build Kubernetes' e2e suite (e2e.test) and its test images from source (once, ~10 min).
	@kube_bins=$$(hack/kube-bins.sh e2e.test ginkgo agnhost) && \
	  $(foreach n,$(E2E_IMAGES),$(IMAGEBUILD) build -out $(IMAGE_OUT_$(n)) $(IMAGE_ARGS_$(n)) &&) true

.PHONY: images-check
images-check: $(IMAGEBUILD) ## Read every image tarball back and check it against its spec (entrypoint, user, labels, files).
	@$(foreach n,$(PRODUCT_IMAGES) $(CLUSTER_IMAGES),$(IMAGEBUILD) check -out $(IMAGE_OUT_$(n)) $(IMAGE_ARGS_$(n)) &&) true

.PHONY: images-verify
images-verify: ## Import every image tarball into a private containerd and podman store; check names, run a few.
	hack/images-verify.sh $(foreach n,$(PRODUCT_IMAGES) $(CLUSTER_IMAGES),$(IMAGE_OUT_$(n)))

# Release images: the product images for every RELEASE_ARCHES, each an OCI image index in an OCI
# layout, bin/release/images/<name>/, with an SPDX SBOM per platform (in the layout as a referrer
# of the platform's manifest, and as bin/release/sbom/<name>-<arch>.spdx.json). The specs are the
# IMAGE_ARGS of `make images` with the binaries' directory made bin/linux_{arch} (imagebuild puts
# each platform's architecture for {arch}). `make images` and its tarballs are not touched.
RELEASE_DIR    := $(BIN)/release
RELEASE_ARCHES := amd64 arm64
# make push REGISTRY=host[:port]/prefix pushes <prefix>/<name>:VERSION and the chart as
# oci://<prefix>/charts/s3csi; checked before anything is built.
ifneq ($(filter push,$(MAKECMDGOALS)),)
ifeq ($(strip $(REGISTRY)),)
$(error usage: make push REGISTRY=host[:port]/prefix (e.g. REGISTRY=ghcr.io/s3csi, or 127.0.0.1:5000/s3csi for a local registry))
endif
endif

.PHONY: images-release
images-release: $(IMAGEBUILD) ## Build the product images for linux/amd64 and linux/arm64 as OCI image indexes with SBOMs into bin/release/.
	@mkdir -p $(foreach a,$(RELEASE_ARCHES),$(BIN)/linux_$(a)) $(RELEASE_DIR)/images $(RELEASE_DIR)/sbom
	@echo "== go build (product binaries for $(RELEASE_ARCHES), VERSION=$(VERSION))"
	$(foreach a,$(RELEASE_ARCHES),$(call product_bins,$(a),$(BIN)/linux_$(a)))
	@$(foreach n,$(PRODUCT_IMAGES),$(IMAGEBUILD) index -out $(RELEASE_DIR)/images/$(n) -sbom-dir $(RELEASE_DIR)/sbom \
	  $(addprefix -platform linux/,$(RELEASE_ARCHES)) $(subst =$(IMAGE_BIN)/,=$(BIN)/linux_{arch}/,$(IMAGE_ARGS_$(n))) &&) true

# The chart as an operator installs it from a registry: `helm package` with VERSION as the chart's
# version and appVersion, into bin/release/charts/s3csi-VERSION.tgz, every entry's time then made
# the commit time (helm stamps the time of day), so that equal charts give equal bytes.
RELEASE_CHART := $(RELEASE_DIR)/charts/s3csi-$(VERSION).tgz

.PHONY: chart
chart: $(HELM) $(IMAGEBUILD) ## Package charts/s3csi (version and appVersion VERSION) as bin/release/charts/s3csi-VERSION.tgz, reproducibly.
	@mkdir -p $(RELEASE_DIR)/charts
	@$(HELM) package charts/s3csi --version $(VERSION) --app-version $(VERSION) --destination $(RELEASE_DIR)/charts >/dev/null
	@$(IMAGEBUILD) retime -time $(GIT_CREATED) $(RELEASE_CHART)

# The kubectl plugin for each PLUGIN_PLATFORMS: kubectl-s3csi built as `make build` builds it
# (GO_RELEASE: static, -trimpath; LDFLAGS' version) and stripped as the images' binaries are, into
# bin/<os>_<arch>/; then bin/release/plugin/kubectl-s3csi_VERSION_<os>_<arch>.tar.gz (the binary
# and LICENSE, reproducible) and the Krew manifest bin/release/plugin/s3csi.yaml, whose URIs are
# under RELEASE_URL, where the release's files are published.
PLUGIN_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
RELEASE_URL      ?= https://github.com/s3csi/s3csi/releases/download/v$(VERSION)
plugin_bin        = $(BIN)/$(subst /,_,$(1))/kubectl-s3csi

.PHONY: plugin
plugin: $(IMAGEBUILD) ## Build kubectl-s3csi for linux and darwin (amd64, arm64) as tarballs with a Krew manifest into bin/release/plugin/.
	@echo "== go build (kubectl-s3csi for $(PLUGIN_PLATFORMS), VERSION=$(VERSION))"
	@$(foreach p,$(PLUGIN_PLATFORMS),(cd cli && $(GO_RELEASE) GOOS=$(word 1,$(subst /, ,$(p))) GOARCH=$(word 2,$(subst /, ,$(p))) \
	  $(GO) build -ldflags "$(IMAGE_LDFLAGS)" -o $(call plugin_bin,$(p)) ./cmd/kubectl-s3csi) &&) true
	@mkdir -p $(RELEASE_DIR)/plugin
	@$(IMAGEBUILD) plugin -out $(RELEASE_DIR)/plugin -version $(VERSION) -url $(RELEASE_URL) -homepage $(IMAGE_SOURCE) \
	  -license LICENSE -created $(GIT_CREATED) $(foreach p,$(PLUGIN_PLATFORMS),-bin $(p)=$(call plugin_bin,$(p)))

.PHONY: release
release: images-release chart plugin ## Build every release file into bin/release/ (images, chart, plugin), write SHA256SUMS and images.txt, list them with their sizes.
	@$(IMAGEBUILD) checksums -dir $(RELEASE_DIR)

.PHONY: push
push: images-release chart ## Push the release images to REGISTRY=host[:port]/prefix as <prefix>/<name>:VERSION, the chart as oci://<prefix>/charts/s3csi (Docker config credentials).
	@$(IMAGEBUILD) push -registry $(REGISTRY) -chart $(RELEASE_CHART) -helm $(HELM) $(foreach n,$(PRODUCT_IMAGES),$(RELEASE_DIR)/images/$(n))

.PHONY: $(IMAGEBUILD)
$(IMAGEBUILD): # Always handed to go build: its cache makes an unchanged build instant.
	@cd hack/imagebuild && $(GO_RELEASE) $(GO) build -o $(IMAGEBUILD) .

##@ Set-up (cached)

.PHONY: tools
tools: $(TOOLS) ## Build the pinned tools into bin/.

.PHONY: tools-test
tools-test: $(VERSITYGW) $(HELM)

.PHONY: tools-verify
tools-verify: $(CONTROLLER_GEN) $(PROTOC_GEN_GO) $(BUF) $(GOLANGCI_LINT)

.PHONY: podman-deps
podman-deps: # Podman (Debian's package): the container tests drive its Docker API, the e2e suite runs a container beside the cluster.
	@command -v podman >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman; }

.PHONY: test-deps
test-deps: # The programs the mounter's conformance suite runs through a mount (services/mounter/conformance), found on the PATH it gives them.
	@for p in sh dd cp tar rsync awk python3 truncate; do PATH=/usr/local/bin:/usr/bin:/bin command -v $$p >/dev/null || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dash coreutils tar rsync mawk python3; break; }; done

.PHONY: bench-deps
bench-deps: # fio and the FUSE clients s3csi-mounter is compared with (Debian's s3fs and rclone).
	@command -v fio >/dev/null && command -v s3fs >/dev/null && command -v rclone >/dev/null || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio s3fs rclone; }

.PHONY: envtest-bins
envtest-bins: ## Build kube-apiserver and etcd from source into ~/.cache/s3csi (once, ~5-10 min).
	@hack/kube-bins.sh kube-apiserver etcd

$(CONTROLLER_GEN) $(PROTOC_GEN_GO): hack/tools/go.mod hack/tools/go.sum
	cd hack/tools && $(GO_RELEASE) $(GO) build -o $(BIN)/ sigs.k8s.io/controller-tools/cmd/controller-gen google.golang.org/protobuf/cmd/protoc-gen-go

# buf is the one tool not built here: its authors publish each release's static binary on the npm
# registry too, and building it from source would cost about five CPU-minutes.
BUF_VERSION := 1.75.0
BUF_SHA512  := 606189031d25a4c084eda3168cd38971fa04686fdefa26079d30b8499d0fe5e4b821f7ccaf203d678fdb6f59b5c0d5c0109f004c530464e024ff9c7d544e3b8a
$(BUF): Makefile hack/npm-bin.sh
	hack/npm-bin.sh @bufbuild/buf-linux-x64 $(BUF_VERSION) $(BUF_SHA512) bin/buf $@

$(GOLANGCI_LINT): hack/tools/lint/go.mod hack/tools/lint/go.sum
	cd hack/tools/lint && $(GO_RELEASE) $(GO) build -o $(BIN)/ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

$(VERSITYGW): hack/tools/versitygw/go.mod hack/tools/versitygw/go.sum
	cd hack/tools/versitygw && $(GO_RELEASE) $(GO) build -o $(BIN)/ github.com/versity/versitygw/cmd/versitygw

$(HELM): hack/tools/helm/go.mod hack/tools/helm/go.sum
	cd hack/tools/helm && $(GO_RELEASE) $(GO) build -o $(BIN)/ helm.sh/helm/v3/cmd/helm

.PHONY: clean
clean: ## Remove bin/ (the envtest cache in ~/.cache/s3csi stays).
	rm -rf $(BIN)
