#!/usr/bin/env bash
# Install everything Outpost's demo and tests need, from the project's own files. Idempotent.
#   - a virtualenv in .venv with the package (outpost-runtime, editable) and its edge, control and dev extras
#   - a Docker engine (Debian's docker.io) if none answers, started in the background
#   - the default sandbox image, built locally (no registry needed)
#   - a throwaway PostgreSQL cluster on 127.0.0.1:55432 for the tests (Debian's postgresql)
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

# -- PostgreSQL for the tests: a throwaway cluster on loopback, port 55432 (not Debian's "main"
# cluster on 5432, which the package may create and which nothing here uses). The tests find it
# through $OUTPOST_TEST_PG_URL, whose default is the URL written to $PG_DIR/url; the role's
# password is in $PG_DIR/password (0600), never on a command line.
PG_DIR=/var/tmp/outpost-pg
PG_PORT=55432
if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
    log "installing PostgreSQL (postgresql)"
    apt_install postgresql
fi
PG_BIN=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
as_pg() {  # initdb refuses root: the cluster runs as the postgres user
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
pg_init() {
    log "creating the test PostgreSQL cluster in $PG_DIR"
    rm -rf "$PG_DIR"
    install -d -m 0700 "$PG_DIR"
    if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$PG_DIR"; fi
    as_pg "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres --auth-local=peer --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 >"$PG_DIR/initdb.log"
    # A throwaway cluster for tests: no fsync (a crash of the machine may lose it; nothing in it matters).
    as_pg tee -a "$PG_DIR/data/postgresql.conf" >/dev/null <<EOF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_DIR'
max_connections = 300
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
    (umask 077 && .venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(24))' >"$PG_DIR/password")
}
pg_start() {
    as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 start >/dev/null
}
if [ ! -f "$PG_DIR/data/PG_VERSION" ]; then
    pg_init
fi
if ! as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" status >/dev/null 2>&1; then
    log "starting the test PostgreSQL cluster (127.0.0.1:$PG_PORT)"
    if ! pg_start; then  # a cluster left broken (it holds nothing of value): start over
        log "the test cluster did not start (see $PG_DIR/server.log); making it anew"
        as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
        pg_init
        pg_start
    fi
fi
if [ ! -f "$PG_DIR/url" ]; then
    # The password goes to psql on stdin (a here-document), not in its arguments.
    as_pg "$PG_BIN/psql" -q -h "$PG_DIR" -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 <<EOF
CREATE ROLE outpost LOGIN CREATEDB PASSWORD '$(cat "$PG_DIR/password")';
CREATE DATABASE outpost_test OWNER outpost;
EOF
    echo "postgresql://outpost@127.0.0.1:$PG_PORT/outpost_test" >"$PG_DIR/url"
fi
log "setup done"
