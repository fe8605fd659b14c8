"""Probes of a process through /proc: resident set size and open file descriptors."""

from __future__ import annotations

import os


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
