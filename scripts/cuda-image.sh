#!/usr/bin/env bash
# make cuda-image: the CUDA-capable image, FROM scratch, tagged
# longshore/longshore:$VERSION-cuda (docs/deploy.md, "A CUDA node image"),
# then checked without a GPU.
#
# Built with integration/images/build.sh, as the plain image is, from:
#   - longshore-node built with -tags cuda against Debian 12's CUDA 11.8
#     headers and stubs (scripts/cuda-check.sh --fetch: non-free, cached);
#   - longshore-coordinator, longshore-pack, longshore-certs as released,
#     so the image can stand in for the plain one (deploy/k8s);
#   - exactly the shared libraries ldd lists: FFmpeg and libjpeg-turbo at
#     their Debian paths, libnvjpeg.so.11 into /usr/lib/x86_64-linux-gnu;
#   - not the driver: libcuda.so.1 comes from the host through the NVIDIA
#     container runtime (docker run --gpus, or a Kubernetes GPU request).
#     The toolkit's stub sits in /usr/lib, last on the loader's path, so
#     the binary loads without a driver: --version answers, anything else
#     exits 2 saying the runtime is missing.
#
# The checks (no GPU needed, nothing leaves the machine: --network none):
#   1. `longshore-node --version` in the image: exit 0, "$VERSION".
#   2. without the runtime: exit 2 and the message naming it.
#   3. the runtime simulated: a fake driver library (cuInit answers
#      CUDA_ERROR_NO_DEVICE) bind-mounted where libnvidia-container puts
#      the driver in a Debian image, /usr/lib/x86_64-linux-gnu/libcuda.so.1:
#      the node must load it, not the stub ("no device visible");
#   4. the same through an ld.so.cache written by ldconfig for a driver in
#      /usr/lib64, as the runtime does for other images and CDI for hosts
#      that keep it there.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
CACHE=${LONGSHORE_CACHE:-$HOME/.cache/longshore}
V=$(cat VERSION)
IMAGE=${CUDA_IMAGE:-longshore/longshore:$V-cuda}
t0=$SECONDS

docker info >/dev/null 2>&1 || { echo "cuda-image: no Docker engine answers 'docker info'" >&2; exit 1; }
{ read -r inc; read -r stubs; read -r libdir; read -r debver; } < <(scripts/cuda-check.sh --fetch)

bin=$CACHE/images/cuda-bin
drv=$CACHE/images/cuda-driver-stubs
rm -rf "$bin" "$drv" && mkdir -p "$bin" "$drv"
cp "$stubs/libcuda.so" "$drv/libcuda.so.1"
ld="-X github.com/longshore/longshore/internal/buildversion.Version=$V"
echo "cuda-image: building longshore-node -tags cuda (CUDA $debver) and the other binaries" >&2
CGO_CFLAGS="-I$inc ${CGO_CFLAGS:-}" CGO_LDFLAGS="-L$stubs ${CGO_LDFLAGS:-}" \
	$GO build -tags cuda -trimpath -ldflags "$ld" -o "$bin/longshore-node" ./cmd/node
for p in coordinator:longshore-coordinator longshore-pack:longshore-pack longshore-certs:longshore-certs; do
	$GO build -trimpath -ldflags "$ld" -o "$bin/${p#*:}" "./cmd/${p%%:*}"
done

BIN=$bin IMAGES=longshore LONGSHORE_IMAGE=$IMAGE CONTEXT=longshore-cuda \
	DOCKERFILE=integration/images/longshore-cuda.Dockerfile LIB_PATH=$libdir DRIVER_STUBS=$drv \
	integration/images/build.sh

# --- checks ---
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "cuda-image: $*" >&2; exit 1; }
run() { docker run --rm --network none "$@"; }

out=$(run "$IMAGE" --version 2>&1) || fail "--version in $IMAGE failed: $out"
[[ $out == "longshore-node $V ("* ]] || fail "--version in $IMAGE printed '$out', want 'longshore-node $V (...'"
echo "cuda-image: 1. $out" >&2

rc=0
out=$(run "$IMAGE" --gpus=all 2>&1) || rc=$?
[[ $rc -eq 2 && $out == *"toolkit's build stub"*"NVIDIA container runtime"* ]] ||
	fail "without the NVIDIA runtime: exit $rc, want 2 and the message naming it: $out"
echo "cuda-image: 2. without the runtime: exit 2, $(cut -c1-90 <<<"$out")..." >&2

# A stand-in for the driver's libcuda.so.1: every symbol the stub has,
# answering CUDA_ERROR_NO_DEVICE (100), and names for the errors.
{
	echo '#include <stddef.h>'
	echo 'int cuGetErrorName(int r, const char **s) { *s = r == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN"; return 0; }'
	nm -D --defined-only "$drv/libcuda.so.1" | awk '$2 == "T" && $3 != "cuGetErrorName" { print "int " $3 "(void) { return 100; }" }'
} >"$work/fakecuda.c"
gcc -shared -fPIC -w -Wl,-soname,libcuda.so.1 -o "$work/libcuda.so.999.1" "$work/fakecuda.c"
nodevice() {
	local rc=0 out
	out=$(run "$@" "$IMAGE" --gpus=all 2>&1) || rc=$?
	[[ $rc -eq 2 && $out == *"no device visible"* ]] || return 1
	echo "$out"
}
out=$(nodevice -v "$work/libcuda.so.999.1:/usr/lib/x86_64-linux-gnu/libcuda.so.1:ro") ||
	fail "a driver in /usr/lib/x86_64-linux-gnu was not the one loaded (the stub shadows it?)"
echo "cuda-image: 3. a driver in /usr/lib/x86_64-linux-gnu: exit 2, $(cut -c1-70 <<<"$out")..." >&2

root=$work/rootfs
mkdir -p "$root"
cid=$(docker create "$IMAGE")
docker export "$cid" | tar -x -C "$root"
docker rm "$cid" >/dev/null
mkdir -p "$root/usr/lib64" && cp "$work/libcuda.so.999.1" "$root/usr/lib64/"
ldconfig -r "$root" /usr/lib64 # writes etc/ld.so.cache, links libcuda.so.1 -> libcuda.so.999.1
out=$(nodevice -v "$root/usr/lib64:/usr/lib64:ro" -v "$root/etc/ld.so.cache:/etc/ld.so.cache:ro") ||
	fail "a driver in /usr/lib64 through ld.so.cache was not the one loaded"
echo "cuda-image: 4. a driver in /usr/lib64 through ld.so.cache: exit 2, $(cut -c1-70 <<<"$out")..." >&2
echo "cuda-image: $IMAGE built and checked in $((SECONDS - t0)) s ($(docker image inspect -f '{{.Size}}' "$IMAGE" | numfmt --to=iec))" >&2
