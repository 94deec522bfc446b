#!/usr/bin/env bash
# Build the Outpost sandbox base image from a minimal Debian rootfs, locally (no registry).
#
#   packaging/sandbox/build.sh [--force] [TAG]        (default TAG: outpost-sandbox:1)
#
# Idempotent: exits 0 at once when TAG exists and carries the label `outpost.recipe` equal to the
# hash of this script; a changed recipe (or --force) rebuilds. Needs root, debootstrap and docker.
set -euo pipefail

SUITE=bookworm
PACKAGES=git,python3,ripgrep,ca-certificates,procps
AGENT_UID=1000
AGENT_GID=1000
IMAGE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

force=0
tag=""
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
        -*) echo "build.sh: unknown option $arg" >&2; exit 2 ;;
        *) tag="$arg" ;;
    esac
done
tag="${tag:-outpost-sandbox:1}"

recipe_hash="$(sha256sum "$0" | cut -c1-16)"
existing="$(docker image inspect --format '{{ index .Config.Labels "outpost.recipe" }}' "$tag" 2>/dev/null || true)"
if [[ "$force" -eq 0 && "$existing" == "$recipe_hash" ]]; then
    echo "build.sh: $tag is up to date (recipe $recipe_hash)"
    exit 0
fi

if [[ "$(id -u)" -ne 0 ]]; then
    echo "build.sh: debootstrap needs root" >&2
    exit 1
fi

workdir="$(mktemp -d /var/tmp/outpost-sandbox.XXXXXX)"
trap 'rm -rf --one-file-system "$workdir"' EXIT
rootfs="$workdir/rootfs"

echo "build.sh: debootstrap $SUITE into $rootfs"
# No mirror argument: debootstrap uses its default mirror.
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" >"$workdir/debootstrap.log" 2>&1 || {
    tail -n 40 "$workdir/debootstrap.log" >&2
    exit 1
}

# The unprivileged user that runs every tool call, and the workspace it owns. A fresh named volume
# mounted on /workspace copies this ownership.
chroot "$rootfs" groupadd --gid "$AGENT_GID" agent
chroot "$rootfs" useradd --uid "$AGENT_UID" --gid "$AGENT_GID" --home-dir /home/agent \
    --create-home --shell /bin/bash agent
install -d -m 0755 -o "$AGENT_UID" -g "$AGENT_GID" "$rootfs/workspace"

# Slim it down: apt caches and lists, docs, man pages, translations.
chroot "$rootfs" apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/log/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
    "$rootfs"/usr/share/locale/*
# Keep the stdlib's __pycache__: the rootfs is read-only at run time, so missing .pyc files would be
# recompiled on every interpreter start (cold start of the in-sandbox daemon).

old_id="$(docker image inspect --format '{{ .Id }}' "$tag" 2>/dev/null || true)"
echo "build.sh: importing $tag"
tar --numeric-owner -C "$rootfs" -c . | docker import \
    --change "USER $AGENT_UID:$AGENT_GID" \
    --change 'WORKDIR /workspace' \
    --change "ENV PATH=$IMAGE_PATH" \
    --change 'ENV LANG=C.UTF-8' \
    --change "LABEL outpost.recipe=$recipe_hash" \
    --change 'CMD ["sleep","infinity"]' \
    - "$tag" >/dev/null
# Drop the image this tag pointed at before, unless something still uses it.
if [[ -n "$old_id" && "$old_id" != "$(docker image inspect --format '{{ .Id }}' "$tag")" ]]; then
    docker image rm "$old_id" >/dev/null 2>&1 || true
fi
echo "build.sh: built $tag (recipe $recipe_hash)"
