#!/usr/bin/env bash
# k8s-build.sh: the Kubernetes control plane `make k8s-check` runs, built
# from the Go module proxy and cached (a cold build is long: about half
# an hour on two shared cores; docs/deploy.md). Prints the bin directory.
#
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
#       k8s.io/kubernetes at the version deploy/k8s/controlplane/go.mod pins
#   kine   etcd's API over SQLite (github.com/k3s-io/kine), the storage
#   kwok   simulated nodes and pods (sigs.k8s.io/kwok)
#
#   scripts/k8s-build.sh          build what is missing, print the bin dir
#   scripts/k8s-build.sh --cached exit 1 (building nothing) unless all are there
#   scripts/k8s-build.sh --kwok-version  the kwok version it builds
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
CACHE=${LONGSHORE_CACHE:-$HOME/.cache/longshore}
KINE_VERSION=${KINE_VERSION:-v0.17.5}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
if [[ ${1:-} == --kwok-version ]]; then echo "$KWOK_VERSION"; exit 0; fi
mod=deploy/k8s/controlplane
kube=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' $mod/go.mod)
[[ -n $kube ]] || { echo "k8s-build: no k8s.io/kubernetes version in $mod/go.mod" >&2; exit 1; }
key=$(cat $mod/go.mod $mod/go.sum <(echo "$KINE_VERSION $KWOK_VERSION $($GO env GOVERSION)") | sha256sum | cut -c1-12)
bin=$CACHE/k8s/$kube-$key/bin
tools="kube-apiserver kube-controller-manager kube-scheduler kubectl kine kwok"
missing=()
for t in $tools; do [[ -x $bin/$t ]] || missing+=("$t"); done
if [[ ${1:-} == --cached ]]; then
	[[ ${#missing[@]} == 0 ]] && { echo "$bin"; exit 0; }
	exit 1
fi
mkdir -p "$bin"
for t in "${missing[@]}"; do
	t0=$SECONDS
	echo "k8s-build: building $t into $bin (once)" >&2
	case $t in
	kine) GOBIN=$bin CGO_ENABLED=1 GOFLAGS= $GO install "github.com/k3s-io/kine@$KINE_VERSION" ;;
	kwok) GOBIN=$bin CGO_ENABLED=0 GOFLAGS= $GO install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" ;;
	*) (cd $mod && CGO_ENABLED=0 GOFLAGS= $GO build -trimpath -o "$bin/$t.tmp" "k8s.io/kubernetes/cmd/$t") && mv "$bin/$t.tmp" "$bin/$t" ;;
	esac
	echo "k8s-build: $t built in $((SECONDS - t0))s" >&2
done
echo "$bin"
