"""``.ci/run`` builds its environment in ``.venv-ci`` (or ``$VENV``), never in the developer's
``.venv``. The interpreter is replaced by a stub that records the venv
directory it is asked to create and stops the script there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

STUB = """#!{python}
import sys, subprocess
if sys.argv[1:3] == ["-m", "venv"]:
    open({record!r}, "w").write(sys.argv[-1])
    sys.exit(3)
sys.exit(subprocess.run([{python!r}, *sys.argv[1:]]).returncode)
"""


def venv_dir_used(tmp_path: Path, env_venv: str | None) -> tuple[int, str]:
    record = tmp_path / "venv-dir"
    stub = tmp_path / "python"
    stub.write_text(STUB.format(python=sys.executable, record=str(record)))
    stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "VENV"}
    env["PYTHON"] = str(stub)
    if env_venv is not None:
        env["VENV"] = env_venv
    done = subprocess.run(
        ["bash", str(REPO / ".ci" / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, record.read_text() if record.exists() else ""


@pytest.mark.parametrize("override", [None, "/tmp/elsewhere-venv"])
def test_ci_run_never_recreates_the_developer_venv(tmp_path: Path, override: str | None) -> None:
    status, used = venv_dir_used(tmp_path, override)
    assert status == 3  # stopped by the stub at the venv step
    assert used == (override or str(REPO / ".venv-ci"))
    assert ".venv-ci/" in (REPO / ".gitignore").read_text().splitlines()
