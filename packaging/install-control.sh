#!/usr/bin/env bash
# Install the Outpost control plane as a systemd service on this host. Run as root, from a checkout:
#
#   packaging/install-control.sh [--wheel PATH] [--wheels DIR] [--model-api-key-file FILE]
#   $EDITOR /etc/outpost-control/config.yaml     # listen addresses, host names: see the comments
#   systemctl start outpost-control
#
# Creates the system user `outpost-control` (no Docker access: sandboxes run on the edges),
# installs the package outpost-runtime with its `control` extra into the venv /opt/outpost, links
# /usr/local/bin/outpost-control, writes the commented sample packaging/config/control.yaml to
# /etc/outpost-control/config.yaml unless that file exists, makes /var/lib/outpost-control (0700),
# installs systemd/outpost-control.service and enables it (it does not start it). Idempotent: run it
# again to upgrade (then `systemctl restart outpost-control`).
#
#   --wheel PATH                install this wheel of outpost-runtime (default: build one from this
#                               checkout)
#   --wheels DIR                offline: dependencies only from this wheelhouse, never from an index
#   --model-api-key-file FILE   the model API key, copied to the unit's credential
#                               /etc/outpost-control/anthropic-api-key (0600 root) and never put on
#                               a command line; without it an empty credential (no key) is made if
#                               there is none
set -euo pipefail

SCRIPT=install-control.sh
# shellcheck source=packaging/install-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/install-lib.sh"

USER_NAME=outpost-control
CONFIG=/etc/outpost-control/config.yaml
KEY=/etc/outpost-control/anthropic-api-key
STATE=/var/lib/outpost-control

key_file=""
script_option() {
    case "$1" in
        --model-api-key-file)
            [[ -r "$2" ]] || die "cannot read $2"
            key_file="$(realpath -- "$2")"
            ;;
        *) return 1 ;;
    esac
}
parse_args "$@"
require_root
require_host

ensure_user "$USER_NAME" "$STATE"

install_package control
ln -sf "$PREFIX/bin/outpost-control" /usr/local/bin/outpost-control

install_config "$PACKAGING/config/control.yaml" "$CONFIG" "$USER_NAME"
# The model API key: a credential systemd hands to the service alone (LoadCredential=), so root's.
if [[ -n "$key_file" ]]; then
    install -m 0600 -o root -g root "$key_file" "$KEY"
    say "wrote the model API key to $KEY"
elif [[ ! -e "$KEY" ]]; then
    install -m 0600 -o root -g root /dev/null "$KEY"
    say "no model API key: $KEY is empty (fine for a model endpoint without keys); to set one:" \
        "$0 --model-api-key-file FILE, or write it there (0600 root), then restart the service"
fi
install -d -m 0700 -o "$USER_NAME" -g "$USER_NAME" "$STATE"
install_docs

install_unit outpost-control
say "installed; next: edit $CONFIG (http_host, tunnel_host, tls_hostnames for other hosts)," \
    "then systemctl start outpost-control"
