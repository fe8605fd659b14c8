"""A unix socket is never bound in or under a directory other users may write without the
sticky bit (they could unlink it, or rename a directory on its path, and bind an impostor),
unless asked to, with a WARNING naming the directory."""

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


def _assert_binds(directory: Path, *, allow_shared_dir: bool = False) -> None:
    """A socket bound at ``directory/s.sock`` exists as a socket; it is closed again."""
    sock = bind_unix_socket(str(directory / "s.sock"), allow_shared_dir=allow_shared_dir)
    try:
        assert stat.S_ISSOCK(os.lstat(directory / "s.sock").st_mode)
    finally:
        sock.close()


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
    _assert_binds(directory)


def test_forcing_a_shared_directory_binds_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = _directory(tmp_path, 0o777)
    with caplog.at_level(logging.WARNING, logger="protocol_py.server"):
        _assert_binds(directory, allow_shared_dir=True)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "0777" in warnings[0].getMessage()


def _nested(tmp_path: Path, ancestor_mode: int) -> tuple[Path, Path]:
    """``(ancestor, directory)``: a private directory (0700) inside one of ``ancestor_mode``."""
    ancestor = _directory(tmp_path, ancestor_mode)
    directory = ancestor / "private"
    directory.mkdir(mode=0o700)
    return ancestor, directory


def test_a_world_writable_ancestor_without_the_sticky_bit_is_refused(tmp_path: Path) -> None:
    ancestor, directory = _nested(tmp_path, 0o777)
    with pytest.raises(PermissionError) as raised:
        bind_unix_socket(str(directory / "s.sock"))
    assert raised.value.errno == errno.EPERM
    message = raised.value.strerror
    assert message.startswith(
        f"directory '{ancestor}' above the socket directory '{directory}' (mode 0777) is "
        "writable by other users without the sticky bit"
    )
    assert "--allow-insecure-socket-dir" in message
    assert not (directory / "s.sock").exists()


def test_an_ancestor_reached_through_a_symlink_is_checked(tmp_path: Path) -> None:
    ancestor, directory = _nested(tmp_path, 0o777)
    link = tmp_path / "link"
    link.symlink_to(directory)
    with pytest.raises(PermissionError) as raised:
        bind_unix_socket(str(link / "s.sock"))
    assert f"'{ancestor}'" in str(raised.value) and "0777" in str(raised.value)


def test_a_sticky_ancestor_is_accepted(tmp_path: Path) -> None:
    _, directory = _nested(tmp_path, 0o1777)
    _assert_binds(directory)


def test_forcing_a_shared_ancestor_binds_with_one_warning_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ancestor, directory = _nested(tmp_path, 0o777)
    with caplog.at_level(logging.WARNING, logger="protocol_py.server"):
        _assert_binds(directory, allow_shared_dir=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"directory '{ancestor}' above the socket directory" in warnings[0]
    assert "0777" in warnings[0] and warnings[0].endswith("(used anyway, as asked)")
