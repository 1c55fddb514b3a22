# s3csi: run `make` (or `make help`) for the targets.
.DEFAULT_GOAL := help
SHELL := /usr/bin/env bash -o pipefail -o errexit -o nounset

MODULES  := shared services/csi-controller services/pod-reconciler services/node-agent services/mounter services/janitor integration
SERVICES := csi-controller pod-reconciler node-agent mounter janitor
BIN      := $(CURDIR)/bin
VERSION ?= $(shell sed -n 's/^appVersion: "\(.*\)"/\1/p' charts/s3csi/Chart.yaml)
# Every binary reports VERSION (GetPluginInfo, labels, the mounter's user agent): shared/version.
LDFLAGS  := -X github.com/s3csi/s3csi/shared/version.Version=$(VERSION)
GO       ?= go
# Tests run each module on its own (GOWORK=off) so every go.mod is proven complete.
GOTEST_FLAGS ?= -race -count=1 -timeout=20m

# Pinned tools: each lives in a module of its own under hack/tools so that its dependencies never
# move the driver's. `make tools` builds them into bin/.
CONTROLLER_GEN := $(BIN)/controller-gen
PROTOC_GEN_GO  := $(BIN)/protoc-gen-go
BUF            := $(BIN)/buf
GOLANGCI_LINT  := $(BIN)/golangci-lint
VERSITYGW      := $(BIN)/versitygw
TOOLS := $(CONTROLLER_GEN) $(PROTOC_GEN_GO) $(BUF) $(GOLANGCI_LINT) $(VERSITYGW)

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} \
	  /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Develop

.PHONY: build
build: ## Compile every module (GOWORK=off) and the service binaries into bin/, stamped with VERSION.
	@for m in $(MODULES); do echo "== build $$m"; (cd $$m && GOWORK=off $(GO) build ./...); done
	@for s in $(SERVICES); do \
	  (cd services/$$s && GOWORK=off CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...); done

.PHONY: test
test: tools-test envtest-bins ## Run every module's tests against the real API server, NATS and S3.
	@for m in $(MODULES); do echo "== test $$m"; (cd $$m && GOWORK=off $(GO) test $(GOTEST_FLAGS) ./...); done

.PHONY: bench
bench: tools-test envtest-bins bench-deps ## Run every module's benchmarks against the real components; prints the figures.
	@for m in $(MODULES); do echo "== bench $$m"; \
	  (cd $$m && GOWORK=off $(GO) test -run='^$$' -bench=. -benchmem -timeout=60m ./...); done

.PHONY: run
run: tools-test envtest-bins ## Bring up the local stack (API server, NATS, S3) and print how to reach it.
	$(GO) run ./integration/cmd/s3csi-devstack

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint in every module.
	@for m in $(MODULES); do echo "== lint $$m"; (cd $$m && GOWORK=off $(GOLANGCI_LINT) run ./...); done

.PHONY: update
# The tools modules are not tidied: they hold `tool` directives pinned with `go get -tool`, and
# tidying them would fetch the tools' own test dependencies, some of which the proxy refuses.
update: generate $(GOLANGCI_LINT) ## Run every generator and formatter, and tidy every product module.
	@for m in $(MODULES); do (cd $$m && GOWORK=off $(GO) mod tidy && GOWORK=off $(GOLANGCI_LINT) fmt ./...); done

.PHONY: generate
generate: $(CONTROLLER_GEN) $(BUF) $(PROTOC_GEN_GO) ## Generate deepcopy, the CRD (charts/s3csi/crds) and the event protos.
	cd shared && $(CONTROLLER_GEN) object paths=./api/... \
	  crd:crdVersions=v1 output:crd:artifacts:config=../charts/s3csi/crds
	cd proto && $(BUF) lint && $(BUF) generate

.PHONY: verify
verify: lint update ## Lint, then fail if `make update` changed or added any file.
	@if [ -n "$$(git status --porcelain)" ]; then \
	  echo "the tree is not clean after 'make update':"; git status --porcelain; git --no-pager diff --stat; exit 1; fi

##@ Set-up (cached)

.PHONY: tools
tools: $(TOOLS) ## Build the pinned tools into bin/.

.PHONY: tools-test
tools-test: $(VERSITYGW)

.PHONY: bench-deps
bench-deps: # The FUSE clients s3csi-mounter is compared with (Debian's s3fs and rclone).
	@command -v s3fs >/dev/null && command -v rclone >/dev/null || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq s3fs rclone; }

.PHONY: envtest-bins
envtest-bins: ## Build kube-apiserver and etcd from source into ~/.cache/s3csi (once, ~5-10 min).
	@hack/kube-bins.sh kube-apiserver etcd

$(CONTROLLER_GEN) $(PROTOC_GEN_GO): hack/tools/go.mod hack/tools/go.sum
	cd hack/tools && GOWORK=off $(GO) build -o $(BIN)/ sigs.k8s.io/controller-tools/cmd/controller-gen google.golang.org/protobuf/cmd/protoc-gen-go

$(BUF): hack/tools/buf/go.mod hack/tools/buf/go.sum
	cd hack/tools/buf && GOWORK=off $(GO) build -o $(BIN)/ github.com/bufbuild/buf/cmd/buf

$(GOLANGCI_LINT): hack/tools/lint/go.mod hack/tools/lint/go.sum
	cd hack/tools/lint && GOWORK=off $(GO) build -o $(BIN)/ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

$(VERSITYGW): hack/tools/versitygw/go.mod hack/tools/versitygw/go.sum
	cd hack/tools/versitygw && GOWORK=off $(GO) build -o $(BIN)/ github.com/versity/versitygw/cmd/versitygw

.PHONY: clean
clean: ## Remove bin/ (the envtest cache in ~/.cache/s3csi stays).
	rm -rf $(BIN)
