#!/usr/bin/env bash
# deps.sh installs what longshore's build, demo and tests need, only when it is
# missing, so it is cheap to call from every make target.
#
#   scripts/deps.sh base    C libraries for cgo (FFmpeg 5.1 dev packages), pkg-config and lld
#   scripts/deps.sh demo    base + Python/Pillow/NumPy used to make the demo dataset
#   scripts/deps.sh python  NumPy, pytest, PyTorch and torchvision for the Python client's tests
#   scripts/deps.sh minio   a MinIO server binary built from source into $LONGSHORE_CACHE/bin
#   scripts/deps.sh observe Debian's prometheus and chromium (the metrics test scrapes real daemons; the status page test loads the page headless)
#   scripts/deps.sh slurm   Debian's slurm-wlm daemons and munge (make slurm-check starts a Slurm cluster on this machine)
#   scripts/deps.sh all     everything above
#
# Debian 12 ships FFmpeg 5.1, which is what go-astiav v0.16.0 needs. MinIO has
# no Debian package and no image can be pulled here, so the server is built
# with `go install` (about 9 minutes and 150 MB, once; the result is cached).
set -euo pipefail

CACHE="${LONGSHORE_CACHE:-$HOME/.cache/longshore}"
# Pinned so CI builds the same server every time (the newest the module
# proxy served when this was written; `latest` works too).
MINIO_VERSION="${MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}"

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

apt_updated=0
need_pkgs() {
	local missing=()
	for p in "$@"; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
			missing+=("$p")
		fi
	done
	if [ ${#missing[@]} -eq 0 ]; then return 0; fi
	echo "deps: installing ${missing[*]}" >&2
	if [ $apt_updated = 0 ]; then
		$SUDO apt-get update -qq
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_base() {
	# lld: the Makefile links cgo builds with it (--gc-sections then
	# --as-needed drops the FFmpeg libraries nothing calls; GNU ld and
	# gold count references from discarded sections).
	need_pkgs pkg-config gcc lld libjpeg62-turbo-dev libavcodec-dev libavformat-dev libavutil-dev libswscale-dev \
		libavfilter-dev libavdevice-dev libswresample-dev ffmpeg espeak-ng python3-av
}

install_demo() {
	install_base
	need_pkgs python3-pil python3-numpy
}

install_python() {
	need_pkgs python3-numpy python3-pytest python3-torch python3-torchvision python3-pil
}

install_observe() {
	need_pkgs prometheus chromium
}

install_slurm() {
	need_pkgs slurmd slurmctld slurm-client munge
}

install_minio() {
	local bin="$CACHE/bin/minio"
	if [ -x "$bin" ]; then return 0; fi
	# type -P searches PATH only (a shell function of the same name must
	# not count).
	local onpath
	if onpath="$(type -P minio)"; then
		mkdir -p "$CACHE/bin"
		ln -sf "$onpath" "$bin"
		return 0
	fi
	echo "deps: building the MinIO server from source (once, ~9 minutes) into $bin" >&2
	mkdir -p "$CACHE/bin"
	CGO_ENABLED=0 GOBIN="$CACHE/bin" GOFLAGS= go install "github.com/minio/minio@${MINIO_VERSION}"
	test -x "$bin"
}

case "${1:-all}" in
base) install_base ;;
demo) install_demo ;;
python) install_python ;;
minio) install_minio ;;
observe) install_observe ;;
slurm) install_slurm ;;
all) install_demo; install_python; install_minio; install_observe; install_slurm ;;
*) echo "usage: $0 base|demo|python|minio|observe|slurm|all" >&2; exit 2 ;;
esac
