#!/usr/bin/env bash
# Install everything Outpost's demo and tests need, from the project's own files. Idempotent.
#   - a virtualenv in .venv with the package (outpost-runtime, editable) and its edge, control and dev extras
#   - a Docker engine (Debian's docker.io) if none answers, started in the background
#   - the default sandbox image, built locally (no registry needed)
# Needs root for the Docker engine and the image build (apt-get, dockerd, debootstrap).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> %s\n' "$*" >&2; }

if [ ! -x .venv/bin/python ]; then
    log "creating .venv"
    python3 -m venv .venv
fi
if ! .venv/bin/python -c 'import control_plane, edge_agent, outpost_wire, grpc_tools, anthropic, docker' 2>/dev/null \
    || [ pyproject.toml -nt .venv/.outpost-installed ]; then
    log "installing outpost-runtime[edge,control,dev] into .venv (editable)"
    .venv/bin/python -m pip install --quiet --upgrade pip
    # Before the rename the distribution was "outpost" (an unrelated PyPI project's name): drop it
    # from an older .venv first, so that only outpost-runtime owns the commands. -I keeps the
    # checkout (and any stale outpost.egg-info in it) off sys.path.
    if .venv/bin/python -I -m pip show --quiet outpost >/dev/null 2>&1; then
        .venv/bin/python -I -m pip uninstall --quiet --yes outpost
    fi
    .venv/bin/python -m pip install --quiet -e '.[edge,control,dev]'
    touch .venv/.outpost-installed
fi

apt_install() {
    if [ "$(id -u)" != 0 ]; then
        log "need root to install $*; run: sudo apt-get install -y $*"
        exit 1
    fi
    if [ -z "${_APT_UPDATED:-}" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        _APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if ! docker info >/dev/null 2>&1; then
    if ! command -v dockerd >/dev/null 2>&1; then
        log "installing the Docker engine (docker.io)"
        apt_install docker.io
    fi
    if ! docker info >/dev/null 2>&1; then
        log "starting dockerd"
        (nohup dockerd >/var/log/outpost-dockerd.log 2>&1 &)
        for _ in $(seq 1 120); do
            docker info >/dev/null 2>&1 && break
            sleep 0.5
        done
        docker info >/dev/null 2>&1 || { log "dockerd did not start; see /var/log/outpost-dockerd.log"; exit 1; }
    fi
fi

if ! command -v debootstrap >/dev/null 2>&1 && ! docker image inspect outpost-sandbox:1 >/dev/null 2>&1; then
    log "installing debootstrap (to build the sandbox image)"
    apt_install debootstrap
fi
bash packaging/sandbox/build.sh
log "setup done"
