#!/usr/bin/env bash
# release-check.sh: the release as a user gets it (`make release-check`,
# after `make release`): the checksums verify, every binary in the
# tarball reports VERSION, and the wheel installs with pip into a clean
# virtual environment, where the quick-start loop of docs/trainers.md reads one
# epoch from the tarball's longshore-node.
#
# The environment sees the system's packages (--system-site-packages) so
# that Debian's python3-numpy and python3-torch serve as the wheel's
# dependencies: nothing is downloaded (--no-index).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-/usr/bin/python3}
V=$(cat VERSION)
ARCH=$(go env GOARCH)
name=longshore-$V-linux-$ARCH
N=${RELEASE_CHECK_N:-64}
[[ -f dist/$name.tar.gz && -f dist/SHA256SUMS ]] || { echo "release-check: no dist/$name.tar.gz: run make release" >&2; exit 1; }
(cd dist && sha256sum --quiet -c SHA256SUMS)

work=$(mktemp -d)
node_pid=
cleanup() { [[ -n $node_pid ]] && kill "$node_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
tar -C "$work" -xzf "dist/$name.tar.gz"
rel=$work/$name
for b in longshore-node longshore-coordinator longshore-pack longshore-manifest longshore-certs; do
	got=$("$rel/bin/$b" --version)
	[[ $got == "$b $V "* ]] || { echo "release-check: $b --version: '$got', want $V" >&2; exit 1; }
done
for f in LICENSE CHANGELOG.md README.md deploy/slurm/longshore.sbatch "longshore-$V-py3-none-any.whl"; do
	[[ -f $rel/$f ]] || { echo "release-check: the tarball has no $f" >&2; exit 1; }
done

"$PY" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --no-index --no-deps "$rel/longshore-$V-py3-none-any.whl"

ds=$(scripts/dataset.sh "$N")
feed=$work/feed
mkdir -p "$feed"
"$rel/bin/longshore-node" --standalone --dataset "$ds" --epochs 1 --batch-size 16 --seed 1 \
	--sink feed --feed-dir "$feed" >"$work/node.log" 2>&1 &
node_pid=$!
# From a directory outside the source tree: the import must come from
# the environment's site-packages.
(cd "$work" && LONGSHORE_FEED_DIR="$feed" N="$N" V="$V" "$work/venv/bin/python" - <<'PY'
import os, sys
import longshore
where = os.path.dirname(longshore.__file__)
assert where.startswith(sys.prefix), f"longshore imported from {where}, not the venv {sys.prefix}"
assert os.path.exists(os.path.join(where, "py.typed")), "no py.typed in the installed package"
from importlib.metadata import version
assert version("longshore") == os.environ["V"], version("longshore")
loader = longshore.Loader()
n = 0
for batch in loader:                 # docs/trainers.md's quick start: one epoch
    x = batch.tensor()
    n += x.shape[0]
    del x, batch
want = int(os.environ["N"])
assert n == want, f"one epoch gave {n} samples, want {want}"
print(f"release-check: the wheel in a clean venv read {n} samples, one epoch, from {where}")
PY
) || { cat "$work/node.log" >&2; exit 1; }
wait "$node_pid" || { echo "release-check: longshore-node failed" >&2; cat "$work/node.log" >&2; exit 1; }
node_pid=
echo "release-check: $name OK"
