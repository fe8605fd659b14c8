"""``protocol-py serve --socket`` refuses a directory other users may write without the sticky
bit, or one below such a directory (exit 1, one line), and ``--allow-insecure-socket-dir``
forces it with one WARNING while the server serves as usual."""

from __future__ import annotations

import os
import select
import signal
import subprocess
from pathlib import Path

from ..support.servers import CONSOLE_SCRIPT
from ._console import cli


def _shared_directory(tmp_path: Path) -> Path:
    directory = tmp_path / "shared"
    directory.mkdir()
    os.chmod(directory, 0o777)
    return directory


def test_a_socket_in_a_shared_directory_is_refused_with_one_line(tmp_path: Path) -> None:
    path = _shared_directory(tmp_path) / "s.sock"
    done = cli("serve", "--socket", str(path), timeout=60)
    assert done.returncode == 1, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"protocol-py serve: cannot listen on unix:{path}: socket directory")
    assert "(mode 0777)" in last and "sticky bit" in last
    assert "--allow-insecure-socket-dir" in last
    assert "Traceback" not in done.stderr
    assert not path.exists()


def test_a_socket_below_a_shared_directory_is_refused_naming_it(tmp_path: Path) -> None:
    shared = _shared_directory(tmp_path)
    private = shared / "private"
    private.mkdir(mode=0o700)
    path = private / "s.sock"
    done = cli("serve", "--socket", str(path), timeout=60)
    assert done.returncode == 1, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith(
        f"protocol-py serve: cannot listen on unix:{path}: directory '{shared}' above the "
        f"socket directory '{private}' (mode 0777)"
    )
    assert "--allow-insecure-socket-dir" in last and "Traceback" not in done.stderr
    assert not path.exists()


def test_the_flag_without_a_socket_is_a_usage_error() -> None:
    done = cli("serve", "--port", "0", "--allow-insecure-socket-dir")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "protocol-py serve: --allow-insecure-socket-dir needs --socket"
    )


def test_allow_insecure_socket_dir_serves_with_one_warning(tmp_path: Path) -> None:
    path = _shared_directory(tmp_path) / "s.sock"
    proc = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "serve", "--handshake", "--socket", str(path),
         "--allow-insecure-socket-dir"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "no handshake line"
        assert proc.stdout.readline() == f"1|unix|{path}|grpc\n"
        described = cli("describe", "--server", f"unix:{path}", timeout=60)
        assert described.returncode == 0, described.stderr
        assert "reference" in described.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    warnings = [line for line in err.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, err
    assert "(mode 0777)" in warnings[0] and "used anyway, as asked" in warnings[0]
    assert not path.exists()  # removed on shutdown
