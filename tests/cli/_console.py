"""Helpers of the CLI tests: the console script run with captured output, input files, a server's
stderr after SIGTERM, and a pricing with a recurring window."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..support.servers import CONSOLE_SCRIPT, Subprocess

# A Tuesday: 11:00 UTC is in DeepSeek's off-peak window 10:00-24:00 Mon-Fri (window 3 of 4),
# 02:00 UTC in the peak hours 01:00-04:00 (the tier's own rates).
OFF_PEAK = datetime(2026, 12, 1, 11, 0, tzinfo=UTC)
PEAK = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


def _pricing_text(rows: list[str]) -> str:
    flash = rows.index(next(r for r in rows if r.startswith("deepseek-flash")))
    text = []
    for row in rows[flash + 1 :]:
        if row and not row.startswith(" "):
            break
        text.append(row.strip())
    return " ".join(text)


def cli(
    *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def stop_server(sub: Subprocess) -> str:
    sub.proc.terminate()
    _, err = sub.proc.communicate(timeout=30)
    assert sub.proc.returncode == 0, err
    return err
