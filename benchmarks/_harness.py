"""What the out-of-process benchmarks share: starting ``protocol-py serve`` as a subprocess and
reading its handshake port, reading its RSS and CPU time from /proc, a one-message
StreamCompletionRequest, repeated runs printed as they end, and medians over runs.

Sizes are bytes unless a name says KiB or MiB; times are seconds.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import StreamCompletionRequest

MIB = 1024 * 1024
"""Bytes in a MiB."""

TICK = os.sysconf("SC_CLK_TCK")
"""Clock ticks per second of /proc/PID/stat's CPU times."""


def spawn_serve(
    *extra: str,
    stderr: int | IO[Any] | None = subprocess.PIPE,
    env: Mapping[str, str] | None = None,
) -> tuple[subprocess.Popen[str], int]:
    """``protocol-py serve --handshake --port 0 EXTRA...`` (this interpreter's package) and the
    port its handshake line names; ``stderr`` as for :class:`subprocess.Popen`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "protocol_py.cli", "serve", "--handshake", "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=None if env is None else dict(env),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, int(line.split("|")[2].rpartition(":")[2])


def status_kib(pid: int, field: str) -> int:
    """A KiB field of /proc/PID/status (``VmRSS``, ``VmHWM``); 0 when absent."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss(pid: int) -> int:
    """The resident set size of ``pid``, bytes."""
    return status_kib(pid, "VmRSS") * 1024


def cpu_s(pid: int) -> float:
    """User plus system CPU time ``pid`` has used, seconds."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def user_request(model: str, prompt: str, *, session: str = "bench") -> StreamCompletionRequest:
    """A StreamCompletionRequest of one user message holding ``prompt``."""
    return StreamCompletionRequest(
        model_id=model,
        messages=[
            Message(
                role=Role.USER,
                id="01J00000000000000000000001",
                content=[ContentBlock(text=TextBlock(text=prompt))],
            )
        ],
        call_context=CallContext(session_id=session, turn_id=session),
    )


def medians(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each key of the first run mapped to its median over ``runs``."""
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def print_runs(
    count: int, measure: Callable[[], dict[str, Any]], line: Callable[[dict[str, Any]], str]
) -> list[dict[str, Any]]:
    """``count`` results of ``measure()``, each printed (indented, flushed) as ``line(result)``
    as soon as it ends, so a long benchmark shows its progress."""
    runs = []
    for _ in range(count):
        run = measure()
        print(f"  {line(run)}", flush=True)
        runs.append(run)
    return runs
