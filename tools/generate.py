#!/usr/bin/env python3
"""Regenerate everything derived from the protos, with one command.

Steps, run from the repository root (or from ``--root``):

1. ``buf generate``: the betterproto2 message classes, grpclib server base and client stub in
   ``gen/python/protocol_py_gen`` (see ``buf.gen.yaml``). The bin directory of the interpreter
   running this script goes first on ``PATH``, so the ``protoc-gen-python_betterproto2`` plugin
   (and ``buf`` itself, from the ``buf-bin`` wheel, and ``ruff``) of this environment are the
   ones used. The plugin pipes its output through ``ruff check --fix`` and ``ruff format``,
   which read whatever ruff configuration they find from the working directory; buf therefore
   runs from a scratch directory holding a fixed ``ruff.toml`` (``GENERATED_RUFF_CONFIG``), so
   the output does not depend on the project's lint settings or on a user-level ruff config.
2. ``buf build``: the buf image of the module including its imports (a FileDescriptorSet with
   buf's per-file metadata, source comments kept) as ``gen/descriptor/protocol.binpb``, for
   other languages (``buf generate gen/descriptor/protocol.binpb``) and for server reflection,
   and the same image as JSON in ``gen/descriptor/protocol.json`` for reviewing changes.

The output is byte-reproducible: running it twice leaves no difference. Needs no network.
Exit status: 0 on success, the failing tool's status otherwise (2 for usage errors).
Run with the interpreter that has the ``dev`` extra installed, for example
``.venv/bin/python tools/generate``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DESCRIPTOR_DIR = Path("gen/descriptor")
IMAGE_NAMES = ("protocol.binpb", "protocol.json")
GENERATED_RUFF_CONFIG = """\
# Formatting of the generated stubs (tools/generate). Changing it changes every generated file.
line-length = 88
"""


def tool_env() -> dict[str, str]:
    """The environment for buf: this interpreter's bin directory first on ``PATH``."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return env


def find_buf(env: dict[str, str]) -> str:
    """Locate the ``buf`` executable on the tool ``PATH``.

    Raises:
        FileNotFoundError: buf is not installed (install the ``dev`` extra, which has buf-bin).
    """
    found = shutil.which("buf", path=env["PATH"])
    if found is None:
        raise FileNotFoundError(
            "buf not found: install the dev extra (pip install -e '.[dev]'), which ships the "
            "buf-bin wheel, and run this script with that environment's python"
        )
    return found


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> None:
    """Run one command in ``cwd``, echoing it; raise CalledProcessError on failure."""
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=cwd, env=env, check=True)


def generate(root: Path) -> None:
    """Regenerate the Python stubs and the descriptor images under ``root``.

    Raises:
        FileNotFoundError: buf is missing.
        subprocess.CalledProcessError: buf (or the plugin) failed.
    """
    env = tool_env()
    buf = find_buf(env)
    with tempfile.TemporaryDirectory(prefix="protocol-py-generate-") as scratch:
        workdir = Path(scratch)
        (workdir / "ruff.toml").write_text(GENERATED_RUFF_CONFIG, encoding="utf-8")
        template = str(root / "buf.gen.yaml")
        run([buf, "generate", str(root), "--template", template, "-o", str(root)], workdir, env)
    (root / DESCRIPTOR_DIR).mkdir(parents=True, exist_ok=True)
    for name in IMAGE_NAMES:
        run([buf, "build", "-o", str(DESCRIPTOR_DIR / name)], root, env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--root",
        type=Path,
        default=REPO_ROOT,
        help="repository root holding buf.yaml, buf.gen.yaml and proto/ (default: this repo)",
    )
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    if not (root / "buf.yaml").is_file() or not (root / "buf.gen.yaml").is_file():
        print(f"error: {root} has no buf.yaml and buf.gen.yaml", file=sys.stderr)
        return 2
    try:
        generate(root)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"error: {' '.join(map(str, exc.cmd))} exited {exc.returncode}", file=sys.stderr)
        return exc.returncode or 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
