"""Probes of a process through /proc (resident set size and open file descriptors), and a
child process run to its end that must succeed."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of a process (default: this one), in bytes, from /proc."""
    with open(f"/proc/{pid or 'self'}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def open_fds(pid: int | None = None) -> int:
    """Number of open file descriptors of a process (default: this one)."""
    return len(os.listdir(f"/proc/{pid or 'self'}/fd"))


def run_ok(
    argv: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``argv`` run to its end (at most ``timeout`` seconds) with its output captured as text;
    the test fails with the child's stderr unless it exited 0."""
    done = subprocess.run(
        list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stderr
    return done
