#!/usr/bin/env bash
# Build the edge agent's container image locally (no registry):
#
#   packaging/edge/build.sh [TAG]            (default TAG: outpost-edge:<version>)
#
# Makes a wheelhouse of the project (outpost-runtime, built from this checkout) and its `edge`
# dependencies with the host's pip (its index, proxy and CA settings), then builds
# packaging/edge/Dockerfile on top of outpost-sandbox:1 (built by packaging/sandbox/build.sh when
# missing). PIP: the pip to use (default: python3 -m pip).
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml")"
tag="${1:-outpost-edge:$version}"
pip="${PIP:-python3 -m pip}"

if ! docker image inspect outpost-sandbox:1 >/dev/null 2>&1; then
    bash "$repo/packaging/sandbox/build.sh"
fi

ctx="$(mktemp -d /var/tmp/outpost-edge-build.XXXXXX)"
trap 'rm -rf --one-file-system "$ctx"' EXIT
# From a clean copy of the checkout: no stale build/ or *.egg-info of it ends up in the wheel.
mkdir "$ctx/src"
tar -C "$repo" --exclude='./.*' --exclude=./build --exclude=./dist --exclude='*.egg-info' \
    --exclude=__pycache__ -cf - . | tar -C "$ctx/src" -xf -
$pip wheel --quiet "$ctx/src[edge]" -w "$ctx/wheels"
rm -rf --one-file-system "$ctx/src"
cp "$repo/packaging/edge/Dockerfile" "$ctx/Dockerfile"
docker build --quiet -t "$tag" "$ctx" >/dev/null
echo "build.sh: built $tag"
