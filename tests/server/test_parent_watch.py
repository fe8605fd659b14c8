"""A plugin exits when its kernel dies, whatever its stdin is
(protocol_py.server.parent_watch): go-plugin hands the plugin the kernel's own stdin, so the
end-of-file watch cannot tell. Linux: PR_SET_PDEATHSIG plus a getppid() poll; elsewhere the
poll alone. A kernel thread that exits (which fires PR_SET_PDEATHSIG) is not a death."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from protocol_py.server import parent_watch
from protocol_py.server.parent_watch import PARENT_DEATH_SIGNAL, PARENT_POLL_INTERVAL, watch_parent
from protocol_py.transport.go_plugin import MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE

from ..support.servers import CONSOLE_SCRIPT

EXIT_TIMEOUT = 10.0

KERNEL = """
import json, subprocess, sys, threading, time
command, env, from_thread = json.loads(sys.argv[1])
started = {}

def start():
    started["plugin"] = subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=open(env["PLUGIN_LOG"], "w"), text=True,
    )
    started["line"] = started["plugin"].stdout.readline()  # printed after PR_SET_PDEATHSIG

if from_thread:  # Linux signals PR_SET_PDEATHSIG when this thread exits: not a death
    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
else:
    start()
print(json.dumps({"pid": started["plugin"].pid, "line": started["line"]}), flush=True)
time.sleep(600)
"""


async def test_a_signal_with_the_parent_alive_is_ignored() -> None:
    deaths: list[str] = []
    watch = watch_parent(lambda: deaths.append("gone"))
    try:
        assert watch.parent == os.getppid()
        if sys.platform.startswith("linux"):
            assert watch.method.startswith(f"prctl(PR_SET_PDEATHSIG, {PARENT_DEATH_SIGNAL.name})")
        os.kill(os.getpid(), PARENT_DEATH_SIGNAL)
        await asyncio.sleep(0.1)
        assert deaths == [] and watch.active
    finally:
        watch.close()
    assert not watch.active


async def test_a_parent_already_gone_is_reported_at_once() -> None:
    deaths: list[str] = []
    watch = watch_parent(lambda: deaths.append("gone"), parent=os.getppid() + 1, use_signal=False)
    assert deaths == ["gone"] and not watch.active
    assert watch.method == f"a getppid() poll every {PARENT_POLL_INTERVAL:g} s"


async def test_the_poll_notices_a_new_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    deaths: list[float] = []
    watch = watch_parent(lambda: deaths.append(time.monotonic()), use_signal=False)
    started = time.monotonic()
    monkeypatch.setattr(parent_watch.os, "getppid", lambda: 1 if watch.parent != 1 else 2)
    await asyncio.sleep(PARENT_POLL_INTERVAL * 2 + 0.2)
    watch.close()
    assert len(deaths) == 1
    assert deaths[0] - started <= PARENT_POLL_INTERVAL + 0.2


def _gone(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped by init counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _kernel(
    tmp_path: Path, *, from_thread: bool, env: dict[str, str]
) -> tuple[subprocess.Popen[str], int, str, Path]:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    log = tmp_path / "plugin.log"
    plugin_env = {k: v for k, v in os.environ.items() if not k.startswith("PLUGIN_")}
    plugin_env.update({"TMPDIR": str(tmpdir), "PLUGIN_LOG": str(log), **env})
    command = [str(CONSOLE_SCRIPT), "serve", "--handshake"]
    kernel = subprocess.Popen(
        [sys.executable, "-c", KERNEL, json.dumps([command, plugin_env, from_thread])],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert kernel.stdout is not None
    started = json.loads(kernel.stdout.readline())
    return kernel, int(started["pid"]), str(started["line"]), log


@pytest.mark.parametrize(
    ("name", "env"),
    [
        ("go-plugin", {MAGIC_COOKIE_KEY: MAGIC_COOKIE_VALUE, "PLUGIN_PROTOCOL_VERSIONS": "1"}),
        ("launch() without a stdin pipe", {"PROTOCOL_PY_EXIT_ON_STDIN_EOF": "1"}),
    ],
)
def test_the_plugin_exits_when_its_kernel_is_killed(
    tmp_path: Path, name: str, env: dict[str, str]
) -> None:
    kernel, pid, line, log = _kernel(tmp_path, from_thread=True, env=env)
    try:
        socket_dir = Path(line.rstrip("\n").split("|")[3 if name == "go-plugin" else 2]).parent
        assert socket_dir.is_dir()
        time.sleep(1.0)  # the starting thread has exited: the plugin must still serve
        assert not _gone(pid), log.read_text()
        assert "is gone" not in log.read_text()
        if sys.platform.startswith("linux"):
            assert "SIGUSR2 with the launching kernel" in log.read_text()
        kernel.send_signal(signal.SIGKILL)
        kernel.wait(timeout=EXIT_TIMEOUT)
        killed = time.monotonic()
        while not _gone(pid) and time.monotonic() - killed < EXIT_TIMEOUT:
            time.sleep(0.01)
        elapsed = time.monotonic() - killed
    finally:
        if kernel.poll() is None:
            kernel.kill()
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)
    text = log.read_text()
    assert _gone(pid), text
    assert elapsed < 2 * PARENT_POLL_INTERVAL + 1.0, (elapsed, text)
    assert "the launching kernel (pid" in text and "is gone; shutting down" in text
    assert "stopped" in text
    assert not socket_dir.exists()
    assert list((tmp_path / "tmp").iterdir()) == []
