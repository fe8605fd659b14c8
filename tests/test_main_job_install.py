"""The main job (`pip install -e .`, then `protocol-py serve`) needs no development tool."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEV_ONLY = (
    "grpc",
    "grpc_tools",
    "grpc_health",
    "grpc_reflection",
    "betterproto2_compiler",
    "mypy",
    "ruff",
    "pytest",
    "hypothesis",
    "build",
)
"""Top-level modules that only the development extra installs."""

BLOCK_AND_SERVE = """
import sys
BLOCKED = set(sys.argv[1].split(","))
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"development-only module imported: {name}")
        return None
sys.meta_path.insert(0, Block())
from protocol_py.cli import main
sys.argv = ["protocol-py", "serve", "--port", "0", "--handshake"]
sys.exit(main())
"""


def _name(requirement: str) -> str:
    return re.split(r"[\\[<>=~! ;]", requirement, maxsplit=1)[0].lower()


def test_the_main_dependencies_hold_no_development_tool() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    main = {_name(r) for r in project["dependencies"]}
    dev = {_name(r) for r in project["optional-dependencies"]["dev"]}
    assert main & dev == set()
    assert {"mypy", "ruff", "hypothesis", "buf-bin", "grpcio-tools", "pytest"} <= dev


def test_serve_starts_without_any_development_module() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCK_AND_SERVE, ",".join(DEV_ONLY)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert re.fullmatch(r"1\|tcp\|127\.0\.0\.1:\d+\|grpc\n", line), err
    assert "development-only module" not in err
