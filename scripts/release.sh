#!/usr/bin/env bash
# release.sh: the release artefacts of VERSION under dist/ (`make release`):
#
#   dist/longshore-$V-linux-$ARCH.tar.gz  bin/ (node, coordinator, pack,
#       manifest, certs; --version says $V), LICENSE, README.md,
#       CHANGELOG.md, docs/, deploy/ (the Slurm script, the Kubernetes
#       manifests) and the Python client's wheel
#   dist/longshore-$V-py3-none-any.whl    the Python client
#   dist/SHA256SUMS                        sha256sum -c checks them all
#
# The node and longshore-pack link FFmpeg 5.1 and libjpeg-turbo
# dynamically (Debian 12's libavcodec59 etc.); the others are static Go
# apart from libc. Images: `make release-images` (docs/deploy.md).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PY=${PY:-/usr/bin/python3}
V=$(cat VERSION)
[[ $V =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || { echo "release.sh: VERSION $V is not a semantic version" >&2; exit 1; }
ARCH=$($GO env GOARCH)
name=longshore-$V-linux-$ARCH
out=dist/$name
rm -rf "$out" "dist/$name.tar.gz" dist/longshore-"$V"-*.whl dist/SHA256SUMS
mkdir -p "$out/bin"

ld="-X github.com/longshore/longshore/internal/buildversion.Version=$V"
for p in node:longshore-node coordinator:longshore-coordinator longshore-pack:longshore-pack \
	longshore-manifest:longshore-manifest longshore-certs:longshore-certs; do
	$GO build -trimpath -ldflags "$ld" -o "$out/bin/${p#*:}" "./cmd/${p%%:*}"
done
for b in "$out"/bin/*; do
	got=$("$b" --version)
	[[ $got == "$(basename "$b") $V "* ]] || { echo "release.sh: $b --version says '$got', want $V" >&2; exit 1; }
done

# The wheel: no network, no build isolation (setuptools and wheel from
# Debian: python3-setuptools, python3-wheel).
py_v=$(sed -n 's/^version = "\(.*\)"/\1/p' clients/python/pyproject.toml)
[[ $py_v == "$V" ]] || { echo "release.sh: clients/python/pyproject.toml says version $py_v, VERSION says $V" >&2; exit 1; }
wb=$(mktemp -d)
trap 'rm -rf "$wb"' EXIT
# Build from a copy: setuptools writes build/ and *.egg-info into the source.
cp -r clients/python "$wb/src"
rm -rf "$wb/src/build" "$wb/src"/*.egg-info
$PY -m pip wheel --quiet --no-deps --no-build-isolation --no-index -w dist "$wb/src" >&2
whl=dist/longshore-$V-py3-none-any.whl
[[ -f $whl ]] || { echo "release.sh: pip wheel made no $whl" >&2; ls dist >&2; exit 1; }

cp LICENSE README.md CHANGELOG.md "$out/"
mkdir -p "$out/docs"
cp docs/*.md docs/*.yaml "$out/docs/"
cp -r deploy "$out/"
rm -rf "$out/deploy/k8s/go.sum" "$out/deploy/k8s/go.mod" "$out/deploy/k8s"/*_test.go "$out/deploy/k8s/controlplane" "$out/deploy/slurm"/*_test.go
cp "$whl" "$out/"
# Reproducible: names sorted, owner 0, times of the last commit.
mtime=$(git log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ)
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="$mtime" -C dist -czf "dist/$name.tar.gz" "$name"
rm -rf "$out"
(cd dist && sha256sum "$name.tar.gz" "$(basename "$whl")" >SHA256SUMS)
echo "release.sh: dist/$name.tar.gz, $whl, dist/SHA256SUMS"
