#!/usr/bin/env python3
"""Regenerate ``outpost_wire/_proto`` from the ``.proto`` sources under ``proto/``.

Usage::

    python scripts/gen_protos.py           # rewrite the generated modules
    python scripts/gen_protos.py --check   # exit 1 if regenerating would change anything (CI)

The sources live at ``proto/outpost_wire/_proto/*.proto`` so that ``-I proto`` makes the generated
modules import as ``outpost_wire._proto.<name>_pb2``. Code comes from the ``protoc`` bundled with
``grpcio-tools`` (``--python_out``) and type stubs from ``mypy-protobuf`` (``--mypy_out``); both are
dev dependencies, and their pinned versions decide the output byte for byte. Generation always goes
to a temporary directory first, so ``--check`` never touches the tree.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGE = Path("outpost_wire") / "_proto"
OUT_DIR = ROOT / PACKAGE
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi")
INIT_TEXT = '"""Generated protobuf modules. Do not edit: run ``python scripts/gen_protos.py``."""\n'


def _find_plugin(name: str) -> str:
    """The protoc plugin next to this interpreter (a venv's bin/) or on PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found is None:
        sys.exit(f"gen_protos: {name} not found; install the dev extra (mypy-protobuf)")
    return found


def _generate(dest: Path) -> dict[str, bytes]:
    """Run protoc into ``dest`` and return {file name: content} of the generated package."""
    try:
        import grpc_tools
    except ImportError:
        sys.exit("gen_protos: grpcio-tools is not installed; install the dev extra")
    include = Path(grpc_tools.__file__).parent / "_proto"
    sources = sorted(p.relative_to(PROTO_ROOT).as_posix() for p in (PROTO_ROOT / PACKAGE).glob("*.proto"))
    if not sources:
        sys.exit(f"gen_protos: no .proto files under {PROTO_ROOT / PACKAGE}")
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"--proto_path={PROTO_ROOT}",
        f"--proto_path={include}",
        f"--plugin=protoc-gen-mypy={_find_plugin('protoc-gen-mypy')}",
        f"--python_out={dest}",
        f"--mypy_out={dest}",
        *sources,
    ]
    proc = subprocess.run(cmd, cwd=PROTO_ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"gen_protos: protoc failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    files = {p.name: p.read_bytes() for p in sorted((dest / PACKAGE).iterdir()) if p.is_file()}
    files["__init__.py"] = INIT_TEXT.encode()
    return files


def _current() -> dict[str, bytes]:
    if not OUT_DIR.is_dir():
        return {}
    return {
        p.name: p.read_bytes()
        for p in sorted(OUT_DIR.iterdir())
        if p.is_file() and (p.name == "__init__.py" or p.name.endswith(GENERATED_SUFFIXES))
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the generated code is stale")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="gen_protos_") as tmp:
        wanted = _generate(Path(tmp))
    have = _current()
    stale = sorted(name for name in wanted.keys() | have.keys() if wanted.get(name) != have.get(name))

    if args.check:
        if stale:
            print(f"gen_protos: {PACKAGE} is stale ({', '.join(stale)}); run scripts/gen_protos.py")
            return 1
        print(f"gen_protos: {PACKAGE} is up to date")
        return 0

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name in stale:
        target = OUT_DIR / name
        if name in wanted:
            target.write_bytes(wanted[name])
        else:
            target.unlink()
    print(f"gen_protos: {len(stale)} file(s) updated in {PACKAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
