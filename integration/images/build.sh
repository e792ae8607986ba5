#!/usr/bin/env bash
# Builds the two images integration/docker-compose.yml runs, FROM scratch,
# with no base image and no network at build time (`make images` calls it):
#
#   longshore/longshore:dev  bin/longshore-node, bin/longshore-coordinator,
#                            bin/longshore-certs and
#                            bin/longshore-pack (cgo: FFmpeg 5.1,
#                            libjpeg-turbo), exactly the shared
#                            libraries `ldd` lists for them plus the dynamic
#                            loader, at the paths ldd resolved them to; the
#                            static helpers upload and healthcheck.
#   longshore/minio:local    the static MinIO server ($LONGSHORE_MINIO, built by
#                            `scripts/deps.sh minio`) and the healthcheck helper.
#
# Each build context is assembled under $LONGSHORE_CACHE/images/<name> and its
# content hash stored as the image label org.longshore.inputs: an image whose
# label matches is not rebuilt (FORCE=1 rebuilds anyway).
#
# Releases (`make release-images`): BIN=<the release's bin/>
# LONGSHORE_IMAGE=longshore/longshore:<VERSION> IMAGES=longshore builds only
# the longshore image, from the release's binaries, tagged with the version.
#
# The CUDA node image (`make cuda-image`, scripts/cuda-image.sh) sets, beside
# those: LIB_PATH, directories (colon-separated) where ldd also looks, whose
# libraries go to /usr/lib/x86_64-linux-gnu/ in the image (nvJPEG from
# Debian's non-free packages, unpacked in a cache); DRIVER_STUBS, a
# directory of the toolkit's stubs of the libraries the NVIDIA container
# runtime mounts from the host at run time (libcuda.so.1): each goes to
# /usr/lib/, the last directory on the loader's search path, so the
# driver's copy wins wherever the runtime puts it, and the binary still
# loads without one; DOCKERFILE and CONTEXT (the context's directory name).
#
# With a registry, use the upstream MinIO image instead of building one:
#   docker-compose -f integration/docker-compose.yml -f integration/minio-upstream.yml up
# (it sets image: minio/minio and a health check that uses `mc ready local`).
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE=${LONGSHORE_CACHE:-$HOME/.cache/longshore}
MINIO=${LONGSHORE_MINIO:-$CACHE/bin/minio}
LONGSHORE_IMAGE=${LONGSHORE_IMAGE:-longshore/longshore:dev}
MINIO_IMAGE=${MINIO_IMAGE:-longshore/minio:local}
GO=${GO:-go}
BIN=${BIN:-bin}
IMAGES=${IMAGES:-longshore minio}
LIB_PATH=${LIB_PATH:-}
DRIVER_STUBS=${DRIVER_STUBS:-}
DOCKERFILE=${DOCKERFILE:-integration/images/longshore.Dockerfile}
CONTEXT=${CONTEXT:-longshore}
LABEL=org.longshore.inputs

for b in "$BIN/longshore-node" "$BIN/longshore-coordinator" "$BIN/longshore-pack" "$BIN/longshore-certs"; do
	[[ -x $b ]] || { echo "build.sh: $b missing: run 'make build' first" >&2; exit 1; }
done
[[ " $IMAGES " != *" minio "* || -x $MINIO ]] || { echo "build.sh: no MinIO server at $MINIO: run 'scripts/deps.sh minio'" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "build.sh: no Docker engine answers 'docker info'" >&2; exit 1; }

# fresh_context DIR: an empty directory to assemble a context in.
fresh_context() { rm -rf "$1" && mkdir -p "$1/rootfs"; }

# put SRC DST: copy SRC (following links) to rootfs path DST.
put() { mkdir -p "$(dirname "$2")" && cp -L --preserve=mode "$1" "$2"; }

# inputs_hash DIR: a hash of every file's path, mode and content in DIR.
inputs_hash() {
	(cd "$1" && find . -type f -printf '%p %m\n' | LC_ALL=C sort && \
		find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16
}

# build IMAGE DIR: docker build DIR unless IMAGE already has its hash.
build() {
	local image=$1 dir=$2 hash have t0 old
	hash=$(inputs_hash "$dir")
	have=$(docker image inspect -f "{{index .Config.Labels \"$LABEL\"}}" "$image" 2>/dev/null || true)
	if [[ $have == "$hash" && -z ${FORCE:-} ]]; then
		echo "build.sh: $image is up to date ($hash)"
		return
	fi
	t0=$SECONDS
	old=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
	docker build --network none --label "$LABEL=$hash" -t "$image" "$dir" >"$dir.log" 2>&1 ||
		{ cat "$dir.log" >&2; echo "build.sh: docker build $image failed" >&2; exit 1; }
	# The image it replaces would stay behind untagged; drop it unless a container uses it.
	if [[ -n $old && $old != "$(docker image inspect -f '{{.Id}}' "$image")" ]]; then
		docker rmi "$old" >/dev/null 2>&1 || true
	fi
	echo "build.sh: built $image ($hash) in $((SECONDS - t0))s, $(docker image inspect -f '{{.Size}}' "$image" | numfmt --to=iec)"
}

# Static helpers for both images.
tools=$CACHE/images/tools
mkdir -p "$tools"
CGO_ENABLED=0 $GO build -trimpath -ldflags=-s -o "$tools/" ./integration/tools/upload ./integration/tools/healthcheck

# --- longshore ---
if [[ " $IMAGES " == *" longshore "* ]]; then
ctx=$CACHE/images/$CONTEXT
fresh_context "$ctx"
put "$BIN/longshore-node" "$ctx/rootfs/usr/local/bin/longshore-node"
put "$BIN/longshore-coordinator" "$ctx/rootfs/usr/local/bin/longshore-coordinator"
put "$BIN/longshore-pack" "$ctx/rootfs/usr/local/bin/longshore-pack"
put "$BIN/longshore-certs" "$ctx/rootfs/usr/local/bin/longshore-certs"
put "$tools/upload" "$ctx/rootfs/usr/local/bin/upload"
put "$tools/healthcheck" "$ctx/rootfs/usr/local/bin/healthcheck"
# Every library ldd resolved ("name => /path (addr)") and the loader
# ("/lib64/ld-linux-x86-64.so.2 (addr)"), at the same paths; those of
# LIB_PATH and DRIVER_STUBS where the header says.
ldpath=$LIB_PATH${DRIVER_STUBS:+${LIB_PATH:+:}$DRIVER_STUBS}
lddx() { LD_LIBRARY_PATH=$ldpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ldd "$@"; }
libs=$(lddx "$BIN/longshore-node" "$BIN/longshore-coordinator" "$BIN/longshore-pack" |
	awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' | LC_ALL=C sort -u)
if lddx "$BIN/longshore-node" | grep -q 'not found'; then
	echo "build.sh: ldd cannot resolve every library of longshore-node:" >&2
	lddx "$BIN/longshore-node" | grep 'not found' >&2
	exit 1
fi
for l in $libs; do
	dir=$(dirname "$l")
	if [[ -n $DRIVER_STUBS && $dir == "${DRIVER_STUBS%/}" ]]; then
		put "$l" "$ctx/rootfs/usr/lib/$(basename "$l")"
	elif [[ -n $LIB_PATH && ":$LIB_PATH:" == *":$dir:"* ]]; then
		put "$l" "$ctx/rootfs/usr/lib/x86_64-linux-gnu/$(basename "$l")"
	else
		put "$l" "$ctx/rootfs$l"
	fi
done
mkdir -p "$ctx/rootfs/etc" "$ctx/rootfs/tmp" "$ctx/rootfs/data"
chmod 1777 "$ctx/rootfs/tmp"
printf 'hosts: files dns\n' >"$ctx/rootfs/etc/nsswitch.conf"
printf 'root:x:0:0:root:/:/nonexistent\n' >"$ctx/rootfs/etc/passwd"
# The NVIDIA container runtime mounts the driver's libraries into
# /usr/lib/x86_64-linux-gnu (on the loader's path) when the image says it
# is Debian's, else into /usr/lib64 (found through the ld.so.cache it
# writes); the libraries here are Debian 12's.
if [[ -n $DRIVER_STUBS ]]; then cp /etc/debian_version "$ctx/rootfs/etc/debian_version"; fi
cp "$DOCKERFILE" "$ctx/Dockerfile"
echo "build.sh: longshore context: $(wc -w <<<"$libs") libraries, $(du -sh "$ctx/rootfs" | cut -f1)"
build "$LONGSHORE_IMAGE" "$ctx"
fi

# --- minio ---
[[ " $IMAGES " == *" minio "* ]] || exit 0
ctx=$CACHE/images/minio
fresh_context "$ctx"
put "$MINIO" "$ctx/rootfs/usr/bin/minio"
put "$tools/healthcheck" "$ctx/rootfs/usr/bin/healthcheck"
mkdir -p "$ctx/rootfs/tmp" "$ctx/rootfs/data"
chmod 1777 "$ctx/rootfs/tmp"
cp integration/images/minio.Dockerfile "$ctx/Dockerfile"
build "$MINIO_IMAGE" "$ctx"
