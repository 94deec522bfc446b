# Shared by packaging/install-edge.sh and packaging/install-control.sh; sourced, not run.
#
# The package goes into one venv, /opt/outpost (both scripts on one host share it: the edge's
# extra and the control plane's extra side by side). It is installed from the checkout these
# scripts sit in (a wheel is built from a clean copy of it) or from a wheel built from one
# (--wheel PATH): always from a file, never looked up by name on an index ("outpost" on PyPI is an
# unrelated project; this one is outpost-runtime). Its dependencies come from the index pip is
# configured with, or, offline, only from a wheelhouse (--wheels DIR, made on a connected host
# with `pip wheel '.[edge,control]' -w DIR` in a checkout, plus `pip download setuptools -d DIR`
# to build from a checkout offline).
#
# The sourcing script sets SCRIPT (its name, for messages) and may define
# `script_option FLAG VALUE` (return 0 if it took FLAG and its VALUE) for its own options.

PREFIX=/opt/outpost
DISTRIBUTION=outpost-runtime
PACKAGING="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$PACKAGING/.." && pwd)"
OUTPOST_WHEEL=""  # --wheel PATH
OUTPOST_WHEELS="" # --wheels DIR

die() {
    echo "$SCRIPT: $*" >&2
    exit 1
}

say() { echo "$SCRIPT: $*"; }

require_root() { [[ "$(id -u)" -eq 0 ]] || die "run as root"; }

# The script's header comment (line 2 up to `set -euo pipefail`) is its --help.
usage() { sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

parse_args() {
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --wheel)
                [[ $# -ge 2 ]] || die "--wheel needs a PATH"
                [[ -f "$2" && "$2" == *.whl ]] || die "--wheel $2: not a wheel file"
                OUTPOST_WHEEL="$(realpath -- "$2")"
                shift 2
                ;;
            --wheels)
                [[ $# -ge 2 ]] || die "--wheels needs a DIR"
                [[ -d "$2" ]] || die "--wheels $2: not a directory"
                OUTPOST_WHEELS="$(realpath -- "$2")"
                shift 2
                ;;
            -h | --help)
                usage
                exit 0
                ;;
            *)
                if [[ $# -ge 2 ]] && declare -F script_option >/dev/null && script_option "$1" "$2"; then
                    shift 2
                else
                    die "unknown argument $1 (see --help)"
                fi
                ;;
        esac
    done
}

require_host() {
    command -v python3 >/dev/null || die "python3 (3.11 or newer, with venv) is needed"
    python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "python3 is $(python3 -V 2>&1 | cut -d' ' -f2); 3.11 or newer is needed"
    command -v systemctl >/dev/null || die "systemd is needed"
}

# A system user NAME with its own group: no login, no home beyond its state directory.
ensure_user() {
    local name="$1" home="$2"
    if ! id -u "$name" >/dev/null 2>&1; then
        useradd --system --user-group --home-dir "$home" --no-create-home --shell /usr/sbin/nologin "$name"
    fi
}

_pip() {
    local args=("$PREFIX/bin/python" -m pip --disable-pip-version-check "$1" --quiet)
    shift
    if [[ -n "$OUTPOST_WHEELS" ]]; then
        args+=(--no-index --find-links "$OUTPOST_WHEELS")
    fi
    "${args[@]}" "$@"
}

# A wheel of the checkout, built from a clean copy in WORK (no stale build/ or *.egg-info of the
# checkout can end up in it, and the checkout is not written to); its path in _BUILT.
_BUILT=""
_wheel_from_checkout() {
    local work="$1"
    [[ -f "$REPO/pyproject.toml" ]] && grep -q "^name = \"$DISTRIBUTION\"" "$REPO/pyproject.toml" \
        || die "$REPO is not a checkout of $DISTRIBUTION (no pyproject.toml naming it); pass --wheel PATH"
    mkdir -p "$work/src" "$work/dist"
    tar -C "$REPO" --exclude='./.*' --exclude=./build --exclude=./dist --exclude='*.egg-info' \
        --exclude=__pycache__ -cf - . | tar -C "$work/src" -xf - || die "cannot copy $REPO"
    _pip wheel --no-deps --no-cache-dir --wheel-dir "$work/dist" "$work/src" \
        || die "building a wheel of $REPO failed (offline? pass --wheels DIR with setuptools in it)"
    local built=("$work/dist"/*.whl)
    [[ ${#built[@]} -eq 1 && -f "${built[0]}" ]] || die "no wheel built from $REPO"
    _BUILT="${built[0]}"
}

_WORK=""
trap '[[ -z "$_WORK" ]] || rm -rf --one-file-system "$_WORK"' EXIT

# install_package EXTRA: the package with EXTRA (edge | control) into the venv $PREFIX.
install_package() {
    local extra="$1" wheel="$OUTPOST_WHEEL"
    [[ -x "$PREFIX/bin/python" ]] || python3 -m venv "$PREFIX" \
        || die "cannot make the venv $PREFIX (Debian: apt-get install python3-venv)"
    if [[ -z "$wheel" ]]; then
        _WORK="$(mktemp -d /var/tmp/outpost-install.XXXXXX)"
        _wheel_from_checkout "$_WORK"
        wheel="$_BUILT"
    fi
    [[ "$(basename "$wheel")" == "${DISTRIBUTION//-/_}"-* ]] || die "$wheel is not a wheel of $DISTRIBUTION"
    # An older install put a distribution named "outpost" here (this project before its rename, or
    # the unrelated PyPI project of that name): it goes first, so that it owns no command.
    if "$PREFIX/bin/python" -I -m pip show --quiet outpost >/dev/null 2>&1; then
        "$PREFIX/bin/python" -I -m pip --disable-pip-version-check uninstall --quiet --yes outpost \
            || die "cannot remove the old distribution 'outpost' from $PREFIX"
        say "removed the distribution 'outpost' from $PREFIX (now $DISTRIBUTION)"
    fi
    # The wheel by its path with its extra; dependencies from the index (or --wheels). Then the
    # wheel again, forced and alone: an upgrade whose version number did not change (a newer
    # checkout) still replaces the code.
    _pip install --upgrade "$wheel[$extra]" || die "pip could not install $wheel[$extra]"
    _pip install --no-deps --force-reinstall "$wheel" || die "pip could not install $wheel"
    local version
    version="$("$PREFIX/bin/python" -c "import importlib.metadata as m; print(m.version('$DISTRIBUTION'))")"
    say "installed $DISTRIBUTION $version [$extra] into $PREFIX"
}

# install_config SAMPLE DEST GROUP: DEST from SAMPLE (mode 0640, root:GROUP), never over a file
# that is there; its directory 0750 root:GROUP.
install_config() {
    local sample="$1" dest="$2" group="$3"
    install -d -m 0750 -o root -g "$group" "$(dirname "$dest")"
    if [[ -e "$dest" ]]; then
        say "kept $dest (the sample is $sample)"
    else
        [[ -f "$sample" ]] || die "no sample config $sample"
        install -m 0640 -o root -g "$group" "$sample" "$dest"
        say "wrote $dest (every key commented out: the defaults)"
    fi
}

# The documentation the units point at (Documentation=file:///usr/share/doc/outpost/...), when
# the checkout has it.
install_docs() {
    if [[ -d "$REPO/docs" ]]; then
        install -d -m 0755 /usr/share/doc/outpost
        install -m 0644 "$REPO"/docs/*.md /usr/share/doc/outpost/
    fi
}

# install_unit NAME: systemd/NAME.service into /etc/systemd/system, enabled (not started); a
# running service is told to restart to pick up the new version.
install_unit() {
    local name="$1"
    install -m 0644 "$REPO/systemd/$name.service" "/etc/systemd/system/$name.service"
    systemctl daemon-reload
    systemctl enable --quiet "$name.service"
    if systemctl is-active --quiet "$name.service"; then
        say "$name is running the version it started with: systemctl restart $name"
    fi
}
