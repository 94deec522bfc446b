#!/usr/bin/env bash
# Install the Outpost edge agent as a systemd service on this host. Run as root, from a checkout:
#
#   packaging/install-edge.sh [--wheels DIR] [--package SPEC] [--docker-group NAME]
#   packaging/install-edge.sh register --control-plane URL --token-file FILE [--ca-fingerprint FP]
#   systemctl start outpost-edge
#
# The first form: creates the system user `outpost-edge` (member of the Docker socket's group, which
# is root-equivalent on this host: see docs/operations.md), installs the package with its `edge`
# extra into the venv /opt/outpost (from PyPI, or offline from a wheelhouse made with
# `pip wheel 'outpost[edge]' -w DIR`), writes /etc/outpost-edge/config.yaml unless it exists,
# installs systemd/outpost-edge.service and enables it. Idempotent: run it again to upgrade.
#
# `register` enrolls the edge with the unit's user and paths: it runs `outpost-edge register` as
# outpost-edge (runuser) against /etc/outpost-edge/config.yaml and /var/lib/outpost-edge, handing it
# the single-use token in its environment (OUTPOST_ENROLL_TOKEN), so the token never appears on a
# command line and the service user never needs read access to FILE.
set -euo pipefail

PREFIX=/opt/outpost
USER_NAME=outpost-edge
CONFIG=/etc/outpost-edge/config.yaml
STATE=/var/lib/outpost-edge
UNIT=/etc/systemd/system/outpost-edge.service
here="$(cd "$(dirname "$0")" && pwd)"

die() { echo "install-edge.sh: $*" >&2; exit 1; }
[[ "$(id -u)" -eq 0 ]] || die "run as root"

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
    register "$@"
    exit 0
fi

wheels="" package="outpost[edge]" docker_group=docker
while [[ $# -gt 0 ]]; do
    case "$1" in
        --wheels) wheels="$(realpath "$2")"; shift 2 ;;
        --package) package="$2"; shift 2 ;;
        --docker-group) docker_group="$2"; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) die "unknown argument $1" ;;
    esac
done

command -v python3 >/dev/null || die "python3 (3.11 or newer) is needed"
command -v systemctl >/dev/null || die "systemd is needed"
getent group "$docker_group" >/dev/null \
    || die "no group '$docker_group': install Docker first (or pass --docker-group)"

# The service user: no login, no home beyond its state directory.
if ! id -u "$USER_NAME" >/dev/null 2>&1; then
    useradd --system --user-group --home-dir "$STATE" --no-create-home \
        --shell /usr/sbin/nologin "$USER_NAME"
fi
usermod -a -G "$docker_group" "$USER_NAME"

# The package, in its own venv.
[[ -x "$PREFIX/bin/python" ]] || python3 -m venv "$PREFIX"
pip=("$PREFIX/bin/pip" install --quiet --disable-pip-version-check --upgrade)
if [[ -n "$wheels" ]]; then
    pip+=(--no-index --find-links "$wheels")
fi
"${pip[@]}" "$package"
ln -sf "$PREFIX/bin/outpost-edge" /usr/local/bin/outpost-edge

# Config (kept if present) and state, owned as the unit expects.
install -d -m 0750 -o root -g "$USER_NAME" /etc/outpost-edge
if [[ ! -e "$CONFIG" ]]; then
    install -m 0640 -o root -g "$USER_NAME" /dev/null "$CONFIG"
    cat >"$CONFIG" <<YAML
# Outpost edge configuration: see docs/configuration.md.
state_dir: $STATE
YAML
fi
install -d -m 0700 -o "$USER_NAME" -g "$USER_NAME" "$STATE"

install -m 0644 "$here/../systemd/outpost-edge.service" "$UNIT"
if [[ "$docker_group" != docker ]]; then
    sed -i "s/^SupplementaryGroups=docker$/SupplementaryGroups=$docker_group/" "$UNIT"
fi
systemctl daemon-reload
systemctl enable --quiet outpost-edge.service
echo "install-edge.sh: installed; next: $0 register --control-plane URL --token-file FILE" \
    "[--ca-fingerprint FP], then systemctl start outpost-edge"
