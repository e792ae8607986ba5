#!/usr/bin/env bash
# make cuda-check: vet and build everything with -tags cuda, against the
# CUDA 11.8 headers, the driver stub (libcuda.so) and nvJPEG from Debian
# 12's non-free component, fetched once into a cache directory. Nothing
# is installed system-wide and the system's apt sources are not touched:
# apt runs with a private sources list and state under the cache.
#
#   CUDA_CACHE  where the unpacked files live (default $LONGSHORE_CACHE/cuda,
#               else ~/.cache/longshore/cuda)
#   CUDA_HOME   use an installed toolkit instead (must hold include/cuda.h)
#   CUDA_OUT    also build binaries (-tags cuda) into this directory:
#   CUDA_BINS   which (default gpucheck; node, coordinator: cmd/NAME;
#               longshore-NAME: cmd/longshore-NAME)
#
# `scripts/cuda-check.sh --fetch` only fetches (if not cached) and prints
# the include and stub directories, the runtime libraries' directory and
# the Debian version, one a line (scripts/cuda-image.sh uses them).
#
# Cold: one apt update of non-free (~0.1 MB), three .deb downloads (the
# toolkit's dev package is ~0.8 GB, most of it static libraries), an
# unpack of ~14 MB of headers and stubs (the .debs are deleted after).
# Cached: the stamp file short-cuts all of it.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
cache=${CUDA_CACHE:-${LONGSHORE_CACHE:-$HOME/.cache/longshore}/cuda}
arch=x86_64-linux-gnu
t0=$SECONDS

fetch() {
	local apt="$cache/apt" tmp="$cache/tmp"
	rm -rf "$tmp" && mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$tmp"
	local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	[ -r "$keyring" ] || { echo "cuda-check: $keyring missing (apt-get install debian-archive-keyring)" >&2; exit 1; }
	echo "deb [signed-by=$keyring] http://deb.debian.org/debian bookworm non-free" >"$apt/sources.list"
	local opts=(-o Dir::Etc::SourceList="$apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
		-o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt" -o Dir::Cache::Archives="$apt/archives"
		-o APT::Sandbox::User=root -o Debug::NoLocking=1 -qq)
	echo "cuda-check: fetching CUDA 11.8 headers, driver stub and nvJPEG (Debian non-free) into $cache" >&2
	apt-get "${opts[@]}" update
	(cd "$tmp" && apt-get "${opts[@]}" download nvidia-cuda-dev libnvjpeg11 libcudart11.0)
	local root="$cache/root.new"
	rm -rf "$root" && mkdir -p "$root"
	# The dev package: headers and the stub libraries only (cuda.h,
	# nvjpeg.h and what they include; stubs/libcuda.so, stubs/libnvjpeg.so).
	dpkg-deb --fsys-tarfile "$tmp"/nvidia-cuda-dev_*.deb |
		tar -x -C "$root" ./usr/include "./usr/lib/$arch/stubs/libcuda.so" "./usr/lib/$arch/stubs/libnvjpeg.so"
	# The runtime libraries, to carry to a device machine (scripts/gpu-check.sh).
	dpkg-deb -x "$tmp"/libnvjpeg11_*.deb "$root"
	dpkg-deb -x "$tmp"/libcudart11.0_*.deb "$root"
	rm -rf "$root/usr/share"
	local ver
	ver=$(dpkg-deb -f "$tmp"/nvidia-cuda-dev_*.deb Version)
	rm -rf "$cache/root" && mv "$root" "$cache/root" && rm -rf "$tmp" "$apt/archives"
	echo "$ver" >"$cache/stamp"
}

if [ "${1:-}" = --fetch ]; then
	if [ ! -f "$cache/stamp" ] || [ ! -f "$cache/root/usr/include/cuda.h" ]; then
		fetch
	fi
	printf '%s\n' "$cache/root/usr/include" "$cache/root/usr/lib/$arch/stubs" "$cache/root/usr/lib/$arch" "$(cat "$cache/stamp")"
	exit 0
fi
if [ -n "${CUDA_HOME:-}" ]; then
	[ -f "$CUDA_HOME/include/cuda.h" ] || { echo "cuda-check: CUDA_HOME=$CUDA_HOME has no include/cuda.h" >&2; exit 1; }
	inc=$CUDA_HOME/include
	lib="$CUDA_HOME/lib64/stubs"
else
	if [ ! -f "$cache/stamp" ] || [ ! -f "$cache/root/usr/include/cuda.h" ]; then
		fetch
	fi
	inc=$cache/root/usr/include
	lib=$cache/root/usr/lib/$arch/stubs
fi
export CGO_ENABLED=1
export CGO_CFLAGS="-I$inc ${CGO_CFLAGS:-}"
export CGO_LDFLAGS="-L$lib ${CGO_LDFLAGS:-}"
grep -q '^#define CUDA_VERSION 1[01][0-9][0-9][0-9]$' "$inc/cuda.h" ||
	{ echo "cuda-check: $inc/cuda.h is not CUDA 10-12 (gorgonia.org/cu v0.9.6 builds against CUDA <= 12 only)" >&2; exit 1; }
echo "cuda-check: CUDA $(sed -n 's/^#define CUDA_VERSION //p' "$inc/cuda.h") headers from $inc ($(cat "$cache/stamp" 2>/dev/null || echo CUDA_HOME))" >&2
$GO vet -tags cuda ./...
$GO build -tags cuda ./...
# The cuda build really holds the CUDA implementation (not a silent
# fallback to the plain one): the tagged gpu package imports cu.
$GO list -tags cuda -f '{{join .Imports " "}}' ./gpu | grep -qw gorgonia.org/cu ||
	{ echo "cuda-check: the cuda build of ./gpu does not import gorgonia.org/cu" >&2; exit 1; }
# The cuda binary links, loads and fails clearly without a driver: run a
# cuda build against the stub under the driver's name; the message must be
# ours (gpu/internal/cuinit runs before gorgonia.org/cu's init, which would
# exit with a terse one).
if [ -z "${CUDA_HOME:-}" ]; then
	probe=$(mktemp -d)
	$GO build -tags cuda -o "$probe/gpucheck" ./cmd/longshore-gpucheck
	$GO test -tags cuda -c -o "$probe/nvjpeg.test" ./gpu/nvjpeg # links against the nvJPEG stub
	cp "$lib/libcuda.so" "$probe/libcuda.so.1"
	rc=0
	LD_LIBRARY_PATH=$probe "$probe/gpucheck" copy >"$probe/out" 2>&1 || rc=$?
	if [ $rc -ne 2 ] || ! grep -q "toolkit's build stub" "$probe/out"; then
		echo "cuda-check: the cuda build without a driver: exit $rc, want 2 and cuinit's message:" >&2
		cat "$probe/out" >&2
		rm -rf "$probe"
		exit 1
	fi
	# --version answers without touching CUDA (internal/buildversion,
	# before cuinit's cuInit): exit 0 and the version line.
	rc=0
	LD_LIBRARY_PATH=$probe "$probe/gpucheck" --version >"$probe/out" 2>&1 || rc=$?
	if [ $rc -ne 0 ] || ! grep -q '^gpucheck [^ ]' "$probe/out"; then
		echo "cuda-check: the cuda build's --version without a driver: exit $rc, want 0 and the version line:" >&2
		cat "$probe/out" >&2
		rm -rf "$probe"
		exit 1
	fi
	rm -rf "$probe"
fi
if [ -n "${CUDA_OUT:-}" ]; then
	mkdir -p "$CUDA_OUT"
	for c in ${CUDA_BINS:-gpucheck}; do
		case $c in
		gpucheck) $GO build -tags cuda -o "$CUDA_OUT/longshore-gpucheck" ./cmd/longshore-gpucheck ;;
		longshore-*) $GO build -tags cuda -o "$CUDA_OUT/$c" "./cmd/$c" ;;
		*) $GO build -tags cuda -o "$CUDA_OUT/longshore-$c" "./cmd/$c" ;;
		esac
	done
fi
echo "cuda-check: go vet and go build -tags cuda ./... passed in $((SECONDS - t0)) s" >&2
