"""A unix socket is never bound in a directory other users may write without the sticky bit
(they could unlink it and bind an impostor), unless asked to, with a WARNING."""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

import pytest

from protocol_py.transport.listen import bind_unix_socket


def _directory(tmp_path: Path, mode: int) -> Path:
    directory = tmp_path / f"d{mode:o}"
    directory.mkdir()
    os.chmod(directory, mode)
    return directory


def test_a_world_writable_directory_without_the_sticky_bit_is_refused(tmp_path: Path) -> None:
    directory = _directory(tmp_path, 0o777)
    with pytest.raises(PermissionError) as raised:
        bind_unix_socket(str(directory / "s.sock"))
    assert raised.value.errno == errno.EPERM
    message = str(raised.value)
    assert str(directory) in message and "0777" in message and "sticky" in message
    assert not (directory / "s.sock").exists()


@pytest.mark.parametrize("mode", [0o1777, 0o755, 0o700])
def test_sticky_or_private_directories_are_accepted(tmp_path: Path, mode: int) -> None:
    directory = _directory(tmp_path, mode)
    sock = bind_unix_socket(str(directory / "s.sock"))
    try:
        assert stat.S_ISSOCK(os.lstat(directory / "s.sock").st_mode)
    finally:
        sock.close()


def test_forcing_a_shared_directory_binds_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = _directory(tmp_path, 0o777)
    with caplog.at_level(logging.WARNING, logger="protocol_py.server"):
        sock = bind_unix_socket(str(directory / "s.sock"), allow_shared_dir=True)
    try:
        assert stat.S_ISSOCK(os.lstat(directory / "s.sock").st_mode)
    finally:
        sock.close()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "0777" in warnings[0].getMessage()
