#!/usr/bin/env python3
"""Check the protocol contract and the handwritten code; exit non-zero if anything fails.

Steps (all run, in this order, each printed with its outcome; select some with ``--step``):

``lint``      ``buf lint`` (STANDARD rules, exceptions in buf.yaml / annotated in the protos).
``format``    ``buf format --diff --exit-code``: the protos are in buf's canonical format.
``breaking``  ``buf breaking proto --against proto-baseline/protocol-X.Y.binpb`` (FILE rules)
              against the newest committed release image (highest X.Y) and every older one
              of the same major, newest first; every image is checked, each named.
``drift``     regenerate (tools/generate) into a scratch copy of proto/ + buf.yaml +
              buf.gen.yaml and compare every file under gen/ with the working tree; any
              changed, missing or extra file is named.
``mypy``      ``mypy`` with the ``[tool.mypy]`` configuration of pyproject.toml (--strict;
              src/protocol_py, tools, benchmarks and the generated stubs they import).
``ruff``      ``ruff check`` and ``ruff format --check`` over the repository (gen/ excluded).

Needs no network. Run with the interpreter that has the ``dev`` extra, for example
``.venv/bin/python tools/check``. Exit status: 0 when every selected step passed, 1 otherwise,
2 for usage errors.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BASELINE_DIR = Path("proto-baseline")
BASELINE_PATTERN = re.compile(r"^protocol-(\d+)\.(\d+)\.binpb$")
GENERATE_INPUTS = ("proto", "buf.yaml", "buf.gen.yaml")
IGNORED_NAMES = {"__pycache__", ".mypy_cache", ".ruff_cache"}


def tool_env() -> dict[str, str]:
    """The environment for the tools: this interpreter's bin directory first on ``PATH``."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def run(cmd: list[str], cwd: Path, *, quiet: bool = False) -> bool:
    """Run one command, echoing it; True when it exited 0 (False also when it is missing).

    With ``quiet`` its output is shown only when it fails.
    """
    print("+ " + " ".join(cmd), flush=True)
    try:
        completed = subprocess.run(
            cmd,
            cwd=cwd,
            env=tool_env(),
            check=False,
            capture_output=quiet,
            text=True,
        )
    except FileNotFoundError as exc:
        print(f"error: {exc}", flush=True)
        return False
    if quiet and completed.returncode != 0:
        print(completed.stdout + completed.stderr, end="", flush=True)
    return completed.returncode == 0


def buf_executable() -> str:
    """Path of ``buf`` on the tool ``PATH``, or plain ``buf`` (reported missing by ``run``)."""
    return shutil.which("buf", path=tool_env()["PATH"]) or "buf"


def baselines(root: Path) -> list[Path]:
    """The committed release images ``buf breaking`` runs against: the newest (highest
    ``MAJOR.MINOR``) and every older one of the same major, newest first; empty when there is
    none. Images of older majors are not compared (a new major may break them)."""
    found: list[tuple[tuple[int, int], Path]] = []
    directory = root / BASELINE_DIR
    if directory.is_dir():
        for path in directory.iterdir():
            match = BASELINE_PATTERN.match(path.name)
            if match:
                found.append(((int(match[1]), int(match[2])), path))
    if not found:
        return []
    found.sort(reverse=True)
    major = found[0][0][0]
    return [path for (version, path) in found if version[0] == major]


def step_lint(root: Path) -> bool:
    """buf lint of the module."""
    return run([buf_executable(), "lint"], root)


def step_format(root: Path) -> bool:
    """buf format: fail, showing the diff, when a proto is not canonically formatted."""
    return run([buf_executable(), "format", "--diff", "--exit-code"], root)


def step_breaking(root: Path) -> bool:
    """buf breaking against every release image of the newest major (:func:`baselines`)."""
    images = baselines(root)
    if not images:
        print(f"error: no {BASELINE_DIR}/protocol-X.Y.binpb release image to compare against")
        return False
    results = [
        run(
            [buf_executable(), "breaking", "proto", "--against", str(image.relative_to(root))], root
        )
        for image in images
    ]
    for image, passed in zip(images, results, strict=True):
        if not passed:
            print(f"error: breaking change against {image.relative_to(root)}")
    return all(results)


def tree_files(base: Path) -> set[str]:
    """Relative paths of all files under ``base``, skipping caches and bytecode."""
    files: set[str] = set()
    if not base.is_dir():
        return files
    for path in base.rglob("*"):
        rel = path.relative_to(base)
        if any(part in IGNORED_NAMES for part in rel.parts) or path.suffix == ".pyc":
            continue
        if path.is_file():
            files.add(rel.as_posix())
    return files


def compare_trees(expected: Path, actual: Path) -> list[tuple[str, str]]:
    """Differences between a fresh generation (``expected``) and the committed tree.

    Returns ``(relative path, what is wrong)`` per differing file, sorted by path; empty when
    the trees are identical.
    """
    fresh, committed = tree_files(expected), tree_files(actual)
    problems = [(p, "missing from the committed tree") for p in fresh - committed]
    problems += [(p, "not produced by generation (stale file)") for p in committed - fresh]
    for rel in fresh & committed:
        if not filecmp.cmp(expected / rel, actual / rel, shallow=False):
            problems.append((rel, "differs from a fresh generation"))
    return sorted(problems)


def step_drift(root: Path) -> bool:
    """Regenerate into a scratch copy and name every file under gen/ that differs."""
    with tempfile.TemporaryDirectory(prefix="protocol-py-check-") as scratch:
        copy = Path(scratch)
        for name in GENERATE_INPUTS:
            source = root / name
            if source.is_dir():
                shutil.copytree(source, copy / name)
            elif source.is_file():
                shutil.copy2(source, copy / name)
            else:
                print(f"error: {name} is missing")
                return False
        generator = Path(__file__).resolve().parent / "generate"
        if not run([sys.executable, str(generator), "--root", str(copy)], root, quiet=True):
            return False
        problems = compare_trees(copy / "gen", root / "gen")
    for rel, what in problems:
        print(f"gen/{rel}: {what}")
    if problems:
        print("generated code is out of date or was edited by hand: run tools/generate")
    return not problems


def step_mypy(root: Path) -> bool:
    """mypy --strict per pyproject.toml."""
    return run([sys.executable, "-m", "mypy"], root)


def step_ruff(root: Path) -> bool:
    """ruff lint and ruff format check of the repository (both run)."""
    checked = run([sys.executable, "-m", "ruff", "check", "."], root)
    formatted = run([sys.executable, "-m", "ruff", "format", "--check", "."], root)
    return checked and formatted


STEPS: dict[str, Callable[[Path], bool]] = {
    "lint": step_lint,
    "format": step_format,
    "breaking": step_breaking,
    "drift": step_drift,
    "mypy": step_mypy,
    "ruff": step_ruff,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--step",
        action="append",
        choices=list(STEPS),
        help="run only this step (repeatable); default: all steps",
    )
    args = parser.parse_args(argv)
    selected: list[str] = args.step or list(STEPS)
    results: dict[str, bool] = {}
    for name, step in STEPS.items():
        if name not in selected:
            continue
        print(f"== {name}", flush=True)
        results[name] = step(REPO_ROOT)
        print(f"== {name}: {'ok' if results[name] else 'FAILED'}", flush=True)
    failed = [name for name, passed in results.items() if not passed]
    if failed:
        print(f"tools/check: FAILED: {', '.join(failed)}", flush=True)
        return 1
    print(f"tools/check: all {len(results)} steps passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
