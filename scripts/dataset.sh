#!/usr/bin/env bash
# dataset.sh N [SEED [MIX]] prints the path of a cached ImageNet-like dataset
# of N real-photo JPEGs, making it first if needed (see scripts/mkdataset.py).
# MIX is imagenet (the default: ImageNet's train mix) or holdout (the held-out
# evaluation set of the fidelity test: validation sizes, small, odd and large
# images, more grayscale and CMYK).
set -euo pipefail
N="${1:-512}"
SEED="${2:-1}"
MIX="${3:-imagenet}"
CACHE="${LONGSHORE_CACHE:-$HOME/.cache/longshore}"
case "$MIX" in
imagenet) OUT="$CACHE/datasets/imagenet-like-n$N-s$SEED" ;;
holdout) OUT="$CACHE/datasets/holdout-n$N-s$SEED" ;;
*) echo "dataset.sh: MIX $MIX: want imagenet or holdout" >&2; exit 2 ;;
esac
SRC="$CACHE/photos"
here="$(cd "$(dirname "$0")" && pwd)"

if [ -f "$OUT/.complete" ]; then echo "$OUT"; exit 0; fi

# Test packages run in parallel and each may ask for the same dataset on a
# fresh machine: one makes it, the others wait for it.
mkdir -p "$CACHE"
exec 9>"$CACHE/.dataset.lock"
flock 9
if [ -f "$OUT/.complete" ]; then echo "$OUT"; exit 0; fi

"$here/deps.sh" demo >&2
if [ ! -f "$SRC/.complete" ]; then
	echo "dataset: fetching photographs from Debian packages" >&2
	rm -rf "$SRC" && mkdir -p "$SRC/debs"
	(cd "$SRC/debs" && apt-get download -q python-matplotlib-data python3-sklearn python3-skimage \
		mate-backgrounds plasma-workspace-wallpapers >&2 2>/dev/null) || {
		sudo_apt=""; [ "$(id -u)" != 0 ] && sudo_apt="sudo"
		$sudo_apt apt-get update -qq >&2
		(cd "$SRC/debs" && apt-get download -q python-matplotlib-data python3-sklearn python3-skimage \
			mate-backgrounds plasma-workspace-wallpapers >&2)
	}
	for d in "$SRC"/debs/*.deb; do dpkg -x "$d" "$SRC/tree"; done
	rm -rf "$SRC/debs"
	touch "$SRC/.complete"
fi
rm -rf "$OUT.tmp"
/usr/bin/python3 "$here/mkdataset.py" --out "$OUT.tmp" --n "$N" --seed "$SEED" --mix "$MIX" --sources "$SRC/tree" >&2
touch "$OUT.tmp/.complete"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "$OUT"
