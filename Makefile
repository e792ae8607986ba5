# longshore — the front door. CI calls the same targets (.ci/run).
#
#   make demo    install what is missing, build, make a small real-photo dataset, run one epoch
#   make test    install what is missing (FFmpeg dev packages, MinIO), vet, unit tests with -race, fuzz smoke
#   make build   bin/longshore-node, bin/longshore-coordinator, bin/longshore-pack, bin/longshore-manifest and bin/longshore-certs
#   make certs   a CA, one host certificate per CERT_HOSTS name and a gossip key in $(CERTS) (docs/security.md)
#   make bench   the benchmark table (pipeline vs ceiling, local vs MinIO)
#   make bench-peer  longshore-node --sink feed + the Python client (and Go in process) vs PyTorch's DataLoader, side by side
#   make bench-host  loader memory of 8 ranks: one node --ranks 8 vs 8 DataLoaders of 8 workers (BENCH_HOST_SAMPLES)
#   make bench-remote  a store across a (user-space) delay: MinIO at +0..50 ms, per object and packed, vs a directory
#   make bench-slowstore  one epoch from MinIO clean and under a fault mix (15% of GETs: 503, 500, reset, short, stall), per object and packed
#   make bench-compare OLD=a.json NEW=b.json  ratios between two benchmark result files
#   make race    unit tests under the race detector only
#   make lint    gofmt + go vet
#   make deps    install every dependency (apt packages, MinIO server build)
#   make bench-formats  Parquet, WebDataset in place and packed tars of the same samples from MinIO, side by side
#   make bench-mixture  the same samples from MinIO as one source and as a --mixture of three, per format and formats mixed, side by side
#   make parquet-crosscheck  the Parquet reader against files Apache Arrow's Go module writes (dataset/parquetcheck)
#   make deploy-check  the Kubernetes manifests (deploy/k8s, Kustomize) rendered and checked against the API types
#   make slurm-check  deploy/slurm/longshore.sbatch, unchanged, on a Slurm cluster started here (2 nodes, gres GPUs): exactly once
#   make k8s-check  deploy/k8s/overlays/example applied to a real API server built here (kine, controllers, scheduler, kwok GPU nodes)
#   make k8s-build   that control plane's binaries, from the module proxy, cached (cold: about half an hour)
#   make release  versioned tarballs of the binaries, the Python wheel and SHA256SUMS in dist/ (VERSION; docs/deploy.md)
#   make release-check  the release as a user gets it: checksums, --version, the wheel in a clean venv reading an epoch
#   make release-images  the FROM scratch image from the release's binaries, tagged longshore/longshore:VERSION, saved in dist/
#   make proto   regenerate cluster/wire/wire.pb.go (protoc + protoc-gen-go; the output is committed)
#   make images  the docker-compose images, FROM scratch (integration/images/build.sh; skipped when unchanged)
#   make integ   the chaos tests against docker-compose (needs a Docker engine): kill, partition, MinIO restart, join
#   make cuda-check  go vet + go build -tags cuda ./... against CUDA 11.8 headers and stubs from Debian non-free (cached)
#   make cuda-image  the CUDA node image, FROM scratch, longshore/longshore:VERSION-cuda (scripts/cuda-image.sh), checked without a GPU
#   make gpu-check-bundle  the binaries and libraries scripts/gpu-check.sh carries to a machine with a GPU
#   make gpu-check-parts   that bundle with the node, xz'd and cut for 64 MiB carries (bin/gpu-parts)

SHELL        := /bin/bash
GO           ?= go
CACHE        ?= $(HOME)/.cache/longshore
export LONGSHORE_CACHE := $(CACHE)
export LONGSHORE_MINIO ?= $(CACHE)/bin/minio
BIN          := bin
# Every cgo build links with lld, dropping the sections nothing calls and
# then the libraries nothing needs: go-astiav's wrappers reference
# libavdevice and libavfilter, which longshore never calls, and resolving
# their ~80 further libraries took half of each process's start (the
# node: 55 ms of CPU to exec and load on 2 cores with them, 31 without;
# docs/performance.md, "Start-up"). A plain `go build` works too, with
# the slower start. scripts/deps.sh base installs lld.
export CGO_CFLAGS  ?= -O2 -g -ffunction-sections -fdata-sections
export CGO_LDFLAGS ?= -fuse-ld=lld -Wl,--gc-sections -Wl,--as-needed
DEMO_N       ?= 512
DEMO_EPOCHS  ?= 1
BENCH_N      ?= 2000
# Three epochs a run: one epoch of 2,000 images is ~2.5 s, where start-up
# and the noise of a shared machine swing a ratio by ±10%.
BENCH_EPOCHS ?= 3
BENCH_PEER_N ?= 4000
# FUZZTIME: a count, not a duration: Go 1.26's fuzz coordinator can fail a
# duration-bounded run with a bare "context deadline exceeded" at the
# deadline on a loaded machine (golang/go#75804, fixed in Go 1.27).
# 20,000 executions are a few seconds for every target.
FUZZTIME     ?= 20000x
FUZZMIN      ?= 5s
PKGS         := ./...
INTEG_RUN    ?= ^TestChaos
INTEG_TIMEOUT ?= 30m
# INTEG_SKIP: a -skip regexp, to leave chaos tests out of a run.
INTEG_SKIP    ?=

PROTOC_GEN_GO ?= $(shell command -v protoc-gen-go || echo $(HOME)/go/bin/protoc-gen-go)

.PHONY: all build demo proto test unit race bench bench-peer bench-media lint fmt deps deps-base deps-demo deps-minio fuzz fuzz-long clean sim-scale
.PHONY: images integ certs cuda-check cuda-image gpu-check-bundle gpu-check-parts deploy-check release release-check release-images slurm-check deps-slurm k8s-check k8s-build

# A small deployment's keys: $(CERTS)/ca (the CA; keep ca.key off the
# hosts), $(CERTS)/<host> for each CERT_HOSTS entry (name:ip, the host
# certificate names both), $(CERTS)/gossip.key. Existing files are kept.
CERTS      ?= $(BIN)/certs
CERT_HOSTS ?= coordinator:127.0.0.1
certs:
	$(GO) build -o $(BIN)/longshore-certs ./cmd/longshore-certs
	@test -f $(CERTS)/ca/ca.crt || $(BIN)/longshore-certs ca --out $(CERTS)/ca
	@for h in $(CERT_HOSTS); do n=$${h%%:*}; ip=$${h#*:}; \
		test -f $(CERTS)/$$n/tls.crt || $(BIN)/longshore-certs host --ca $(CERTS)/ca --name $$n --ip $$ip --dns $$n --out $(CERTS)/$$n || exit 1; done
	@test -f $(CERTS)/gossip.key || $(BIN)/longshore-certs gossip-key --out $(CERTS)/gossip.key

all: build

deps: ; scripts/deps.sh all
deps-base: ; @scripts/deps.sh base
deps-demo: ; @scripts/deps.sh demo
deps-minio: ; @scripts/deps.sh minio
deps-slurm: ; @scripts/deps.sh slurm

build: deps-base
	$(GO) build -o $(BIN)/longshore-node ./cmd/node
	$(GO) build -o $(BIN)/longshore-coordinator ./cmd/coordinator
	$(GO) build -o $(BIN)/longshore-pack ./cmd/longshore-pack
	$(GO) build -o $(BIN)/longshore-manifest ./cmd/longshore-manifest
	$(GO) build -o $(BIN)/longshore-certs ./cmd/longshore-certs
	$(GO) build -o $(BIN)/longshore-lineage ./cmd/longshore-lineage

demo: deps-demo build
	@ds=$$(scripts/dataset.sh $(DEMO_N)) && \
	$(BIN)/longshore-node --standalone --dataset "$$ds" --epochs $(DEMO_EPOCHS) --batch-size 32 \
		--transform train --seed 1 --sink null --stats-json $(BIN)/demo-stats.json

lint: deps-base
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

fmt: ; gofmt -w $$(git ls-files '*.go')

# A test binary's own limit. Tests wait on events, not on the clock; on a
# loaded machine (a -race run of every package on two cores) the slowest,
# the Python client's (examples/feed_server), takes minutes, and its hang
# bound is a quarter of this (clients/python/tests/limits.py).
TEST_TIMEOUT ?= 30m

unit: deps
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

race: deps
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

# Every fuzz target, as package:Target. Each runs briefly (FUZZTIME) on
# top of its committed seed corpus; `make fuzz FUZZTIME=10m` is a long run
# (see FUZZTIME above on timed runs).
FUZZ_TARGETS := \
	./decode/:FuzzDecode ./decode/:FuzzDecodeFFmpeg ./decode/:FuzzParseHeader \
	./dataset/:FuzzManifest ./dataset/:FuzzManifestReference ./dataset/:FuzzManifestJSONLine ./dataset/:FuzzManifestDecimal \
	./dataset/:FuzzIndexTar ./dataset/:FuzzReadExclusions ./dataset/:FuzzScanManifest ./dataset/:FuzzManifestIndex ./cmd/longshore-pack/:FuzzWebDataset \
	./dataset/:FuzzWebDatasetMemberFields ./dataset/:FuzzParquet ./feed/:FuzzParseFields \
	./storage/s3/:FuzzContentRange ./storage/s3/:FuzzRetryAfter \
	./cluster/journal/:FuzzDecode ./cluster/journal/:FuzzParseToken ./cluster/wire/:FuzzWire \
	./feed/:FuzzClientFrames ./feed/:FuzzServerFrames ./delivery/:FuzzLocalToken \
	./gpu/nvjpeg/:FuzzProbe

fuzz: deps-base
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; echo "fuzz $$name ($$pkg)"; \
		$(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=$(FUZZMIN) $$pkg; \
	done

# The long run (issue 15): every target FUZZ_LONG_TIME each, FUZZ_LANES side by side.
FUZZ_LONG_TIME ?= 10m
FUZZ_LANES     ?= 2
fuzz-long: deps-base
	FUZZ_LONG_TIME=$(FUZZ_LONG_TIME) FUZZ_LANES=$(FUZZ_LANES) GO=$(GO) scripts/fuzz-long.sh $(FUZZ_TARGETS)

test: deps lint race fuzz

BENCH_JSON   ?= docs/bench/bench.json
bench: deps build
	@ds=$$(scripts/dataset.sh $(BENCH_N)) && $(GO) run ./cmd/longshore-bench --dataset "$$ds" --epochs $(BENCH_EPOCHS) --json $(BENCH_JSON)

# Needs Debian's python3-torch, python3-torchvision, python3-pil, python3-numpy.
# The raw results (every repetition, CPU model, load average) go to
# docs/bench/: commit them with the figures docs/performance.md quotes.
BENCH_PEER_JSON ?= docs/bench/bench-peer.json
bench-peer: deps build
	$(GO) build -o $(BIN)/longshore-bench ./cmd/longshore-bench
	@ds=$$(scripts/dataset.sh $(BENCH_PEER_N)) && /usr/bin/python3 scripts/bench_peer.py --dataset "$$ds" --json $(BENCH_PEER_JSON)

# Loader memory at host scale (issue 19): 8 trainers × DataLoader(num_workers=8)
# against one longshore-node --ranks 8 --sink feed + 8 Python trainers, over
# BENCH_HOST_SAMPLES hard links into the BENCH_PEER_N real-photo set; a job of
# 100 epochs. BENCH_HOST_ARGS: more, e.g. "--step-ms 300" (trainers slower than
# the loader) or --node-args "--memory-budget 512MiB".
BENCH_HOST_SAMPLES ?= 100000
BENCH_HOST_ARGS    ?=
BENCH_HOST_JSON    ?= docs/bench/bench-host.json
bench-host: deps build
	@ds=$$(scripts/dataset.sh $(BENCH_PEER_N)) && /usr/bin/python3 scripts/bench_host.py --source "$$ds" \
		--samples $(BENCH_HOST_SAMPLES) $(BENCH_HOST_ARGS) --json $(BENCH_HOST_JSON)

# make bench-compare OLD NEW (or OLD=a.json NEW=b.json): new/old of every
# median figure of two results of one benchmark. The two words after the
# goal are the files, not goals (an empty rule each).
.PHONY: bench-host bench-compare bench-remote
BENCH_REMOTE_JSON ?= docs/bench/bench-remote.json
BENCH_REMOTE_REPS ?= 3
bench-remote: deps build
	cd integration && LONGSHORE_BENCH_JSON=$(abspath $(BENCH_REMOTE_JSON)) LONGSHORE_BENCH_REPS=$(BENCH_REMOTE_REPS) $(GO) test -run '^$$' -bench BenchmarkRemoteStore -benchtime 1x -timeout 60m .

# A slow store (docs/faults.md): the epoch clean and under the fault mix,
# side by side, exactly once checked. LONGSHORE_BENCH_NODES="old=PATH,new=PATH"
# compares two builds.
.PHONY: bench-slowstore
BENCH_SLOWSTORE_REPS ?= 3
bench-slowstore: deps build
	cd integration && LONGSHORE_BENCH_REPS=$(BENCH_SLOWSTORE_REPS) $(GO) test -run '^$$' -bench BenchmarkSlowStoreEpoch -benchtime 1x -timeout 60m .

ifeq (bench-compare,$(firstword $(MAKECMDGOALS)))
CMP_FILES := $(wordlist 2,3,$(MAKECMDGOALS))
OLD ?= $(word 1,$(CMP_FILES))
NEW ?= $(word 2,$(CMP_FILES))
$(eval $(CMP_FILES):;@:)
endif
bench-compare:
	@test -n "$(OLD)" -a -n "$(NEW)" || { echo "usage: make bench-compare OLD=old.json NEW=new.json" >&2; exit 2; }
	@/usr/bin/python3 scripts/bench_compare.py "$(OLD)" "$(NEW)"

# Issue 16's internet-scale simulation, in one process and simulated time:
# the real coordinator state machine, every rank's real node side and the
# journal codec; 4,096 nodes × 8 ranks, a billion samples, 1%/hour churn.
# SIMSCALE_FLAGS="--nodes 512 --samples 125000000" for a smaller run.
SIMSCALE_FLAGS ?=
sim-scale: deps-base
	@mkdir -p $(BIN)
	$(GO) run ./cmd/longshore-simscale --json $(BIN)/sim-scale.json $(SIMSCALE_FLAGS)

# Video and audio against the ffmpeg ceiling and a DataLoader+PyAV peer
# (docs/media.md). Needs Debian's ffmpeg, python3-av, python3-torch.
bench-media: deps build
	/usr/bin/python3 scripts/bench_media.py --node $(BIN)/longshore-node --json $(BIN)/bench-media.json

proto:
	cd cluster/wire && protoc --plugin=protoc-gen-go=$(PROTOC_GEN_GO) --go_out=. --go_opt=paths=source_relative wire.proto

# The Kubernetes manifests decoded strictly against k8s.io/api (a module
# of its own, so the daemons do not link the Kubernetes client types).
deploy-check: deps-base
	cd deploy/k8s && $(GO) test -count=1 ./...

# Parquet, WebDataset in place and the packed path (the same tars with
# longshore-pack --index's manifest) from MinIO, side by side, interleaved:
# images/s and requests a sample (docs/parquet.md, "Benchmark").
.PHONY: bench-formats
BENCH_FORMATS_REPS ?= 3
bench-formats: deps
	LONGSHORE_BENCH_REPS=$(BENCH_FORMATS_REPS) $(GO) test ./cmd/node -run '^$$' -bench FormatsMinIO -benchtime 1x -timeout 30m

# One source of N samples against a --mixture of three sources of N/3
# (weights 1:1:1) from MinIO, packed, per object, and packed + Parquet +
# per object, interleaved: images/s, x single, requests a sample
# (docs/mixtures.md, "Benchmark").
.PHONY: bench-mixture
BENCH_MIXTURE_REPS ?= 3
bench-mixture: deps
	LONGSHORE_BENCH_REPS=$(BENCH_MIXTURE_REPS) $(GO) test ./cmd/node -run '^$$' -bench MixtureMinIO -benchtime 1x -timeout 30m

# The Parquet reader against files written by Apache Arrow's Go module
# (a module of its own: Arrow requires a newer gRPC than the daemons').
.PHONY: parquet-crosscheck
parquet-crosscheck: deps-base
	cd dataset/parquetcheck && $(GO) test -count=1 ./...

clean: ; rm -rf $(BIN)

# The Slurm script on a real Slurm cluster (munged, slurmctld, two slurmd
# on this machine: scripts/slurm-cluster.sh), with a trainer per rank.
slurm-check: deps-slurm deps-demo build
	$(GO) test -tags slurmcheck -count=1 -v -timeout 15m ./deploy/slurm/

# The Kubernetes manifests on a real control plane (scripts/k8s-check.sh);
# its binaries are built once (scripts/k8s-build.sh, deploy/k8s/controlplane).
k8s-build: ; GO=$(GO) scripts/k8s-build.sh
k8s-check: deps-base
	GO=$(GO) scripts/k8s-check.sh

# Releases (docs/deploy.md): VERSION names them; the binaries report it.
RELEASE_VERSION := $(shell cat VERSION)
RELEASE_NAME     = longshore-$(RELEASE_VERSION)-linux-$(shell $(GO) env GOARCH)
release: deps-base
	GO=$(GO) scripts/release.sh
release-check: release
	scripts/release-check.sh
release-images: release
	t=$$(mktemp -d) && tar -C $$t -xzf dist/$(RELEASE_NAME).tar.gz && \
	BIN=$$t/$(RELEASE_NAME)/bin IMAGES=longshore LONGSHORE_IMAGE=longshore/longshore:$(RELEASE_VERSION) \
		integration/images/build.sh; rc=$$?; rm -rf $$t; exit $$rc
	docker save longshore/longshore:$(RELEASE_VERSION) | gzip >dist/longshore-image-$(RELEASE_VERSION).tar.gz
	cd dist && sha256sum longshore-image-$(RELEASE_VERSION).tar.gz >>SHA256SUMS

images: build deps-minio
	integration/images/build.sh

# Each chaos test runs its own compose project and removes it afterwards.
integ: images
	$(GO) test -tags integration -count=1 -v -timeout $(INTEG_TIMEOUT) -run '$(INTEG_RUN)' $(if $(INTEG_SKIP),-skip '$(INTEG_SKIP)') ./integration/

# CUDA headers, the driver stub and nvJPEG come from Debian 12's non-free
# component into $(CACHE)/cuda (no system-wide install); the default build
# needs none of it.
cuda-check: deps-base
	scripts/cuda-check.sh

# The node built -tags cuda in a FROM scratch image with nvJPEG; the
# driver comes from the host through the NVIDIA container runtime
# (docs/deploy.md, "A CUDA node image"). Needs a Docker engine.
cuda-image: deps-base
	GO=$(GO) scripts/cuda-image.sh

# What scripts/gpu-check.sh needs on the device machine (no Go there).
GPU_BUNDLE ?= $(BIN)/gpu-bundle
# GPU_BUNDLE_NODE=1: with longshore-node, its libraries and a dataset.
gpu-check-bundle: deps-base
	CUDA_OUT=$(GPU_BUNDLE)/bin CUDA_BINS="gpucheck $(if $(filter 1,$(GPU_BUNDLE_NODE)),node longshore-nvjpegcheck longshore-nvdeccheck)" scripts/cuda-check.sh
	GPU_BUNDLE_NODE=$(GPU_BUNDLE_NODE) scripts/gpu-check.sh --bundle $(GPU_BUNDLE)

# The whole bundle (with the node) xz'd and cut into parts of at most
# 54,000,000 bytes in $(GPU_PARTS), for machines that take 64 MiB a call
# (docs/performance.md, "The device check").
GPU_PARTS ?= $(BIN)/gpu-parts
gpu-check-parts:
	$(MAKE) gpu-check-bundle GPU_BUNDLE_NODE=1
	scripts/gpu-check.sh --parts $(GPU_BUNDLE) $(GPU_PARTS)
