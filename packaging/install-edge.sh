#!/usr/bin/env bash
# Install the Outpost edge agent as a systemd service on this host. Run as root, from a checkout:
#
#   packaging/install-edge.sh [--wheel PATH] [--wheels DIR] [--docker-group NAME]
#   packaging/install-edge.sh register --control-plane URL --token-file FILE [--ca-fingerprint FP]
#   systemctl start outpost-edge
#
# The first form: creates the system user `outpost-edge` (member of the Docker socket's group, which
# is root-equivalent on this host: see docs/operations.md), installs the package outpost-runtime
# with its `edge` extra into the venv /opt/outpost, links /usr/local/bin/outpost-edge, writes the
# commented sample packaging/config/edge.yaml to /etc/outpost-edge/config.yaml unless that file
# exists, installs systemd/outpost-edge.service and enables it (it does not start it).
# Idempotent: run it again to upgrade (then `systemctl restart outpost-edge`).
#
#   --wheel PATH        install this wheel of outpost-runtime (default: build one from this checkout)
#   --wheels DIR        offline: dependencies only from this wheelhouse, never from an index
#   --docker-group NAME the group owning the Docker socket (default: docker)
#
# `register` enrolls the edge with the unit's user and paths: it runs `outpost-edge register` as
# outpost-edge (runuser) against /etc/outpost-edge/config.yaml and /var/lib/outpost-edge, handing it
# the single-use token in its environment (OUTPOST_ENROLL_TOKEN), so the token never appears on a
# command line and the service user never needs read access to FILE.
set -euo pipefail

SCRIPT=install-edge.sh
# shellcheck source=packaging/install-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/install-lib.sh"

USER_NAME=outpost-edge
CONFIG=/etc/outpost-edge/config.yaml
STATE=/var/lib/outpost-edge
UNIT=/etc/systemd/system/outpost-edge.service

register() {
    local url="" token="" fp=""
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --control-plane) url="$2"; shift 2 ;;
            --token-file) token="$(realpath "$2")"; shift 2 ;;
            --ca-fingerprint) fp="$2"; shift 2 ;;
            *) die "register: unknown argument $1" ;;
        esac
    done
    [[ -n "$url" && -n "$token" ]] || die "register needs --control-plane URL and --token-file FILE"
    [[ -r "$token" ]] || die "cannot read $token"
    [[ -x "$PREFIX/bin/outpost-edge" ]] || die "not installed: run $0 first"
    local args=(register --config "$CONFIG" --control-plane "$url")
    [[ -n "$fp" ]] && args+=(--ca-fingerprint "$fp")
    # The token goes in through the environment of that one process (root reads FILE): never on a
    # command line, and the service user needs no access to FILE.
    install -d -m 0700 -o "$USER_NAME" -g "$USER_NAME" "$STATE"
    (
        umask 077
        OUTPOST_ENROLL_TOKEN="$(cat -- "$token")"
        export OUTPOST_ENROLL_TOKEN
        cd "$STATE"
        exec runuser -u "$USER_NAME" -- "$PREFIX/bin/outpost-edge" "${args[@]}"
    )
}

if [[ "${1:-}" == "register" ]]; then
    shift
    require_root
    register "$@"
    exit 0
fi

docker_group=docker
script_option() {
    case "$1" in
        --docker-group) docker_group="$2" ;;
        *) return 1 ;;
    esac
}
parse_args "$@"
require_root
require_host
getent group "$docker_group" >/dev/null \
    || die "no group '$docker_group': install Docker first (or pass --docker-group)"

ensure_user "$USER_NAME" "$STATE"
usermod -a -G "$docker_group" "$USER_NAME"

install_package edge
ln -sf "$PREFIX/bin/outpost-edge" /usr/local/bin/outpost-edge

install_config "$PACKAGING/config/edge.yaml" "$CONFIG" "$USER_NAME"
install -d -m 0700 -o "$USER_NAME" -g "$USER_NAME" "$STATE"
install_docs

install_unit outpost-edge
if [[ "$docker_group" != docker ]]; then
    sed -i "s/^SupplementaryGroups=docker$/SupplementaryGroups=$docker_group/" "$UNIT"
    systemctl daemon-reload
fi
say "installed; next: $0 register --control-plane URL --token-file FILE [--ca-fingerprint FP]," \
    "then systemctl start outpost-edge"
