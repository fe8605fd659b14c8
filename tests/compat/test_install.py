"""The dependency patches of :mod:`protocol_py._compat`: each installs on the pinned versions,
is a no-op on a dependency of another shape, and none is installed by an import."""

from __future__ import annotations

import pkgutil
import platform
import subprocess
import sys
import types
from importlib.metadata import version

import pytest
from grpclib import protocol
from grpclib.exceptions import StreamTerminatedError
from hyperframe import frame
from packaging.specifiers import SpecifierSet

import protocol_py._compat
from protocol_py._compat import (
    PATCHES,
    grpclib_closed_connection,
    grpclib_goaway,
    hyperframe_frame_repr,
)


def run(code: str) -> None:
    """Run ``code`` in a fresh interpreter (no patch installed yet); fail with its stderr."""
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_the_table_lists_every_patch_module_with_an_upstream_and_the_installed_versions() -> None:
    modules = {
        info.name
        for info in pkgutil.iter_modules(protocol_py._compat.__path__)
        if info.name != "grpclib_private"  # named reads, not a patch
    }
    assert {patch.module for patch in PATCHES} == modules
    for patch in PATCHES:
        module = getattr(protocol_py._compat, patch.module)
        assert patch.install is module.install
        installed = (
            platform.python_version()
            if patch.dependency == "CPython"
            else version(patch.dependency)
        )
        assert installed in SpecifierSet(patch.versions), patch.module
        assert patch.upstream == "none filed" or patch.upstream.startswith("https://github.com/")
        assert patch.symptom and patch.delete_when
        assert patch.module in (protocol_py._compat.__doc__ or "")


def test_imports_install_nothing_and_install_installs_every_patch() -> None:
    run(
        "from grpclib import protocol\n"
        "from hyperframe.frame import DataFrame\n"
        "import grpclib.server\n"
        "from h2.connection import H2Connection\n"
        "close, create = protocol.EventsProcessor.close, protocol.Connection.create_stream\n"
        "abort = grpclib.server._abort\n"
        "headers = H2Connection._receive_headers_frame\n"
        "from asyncio import selector_events\n"
        "accept = selector_events.BaseSelectorEventLoop._accept_connection\n"
        "from httpx import _client\n"
        "bound_close = _client.BoundAsyncStream.aclose\n"
        "import protocol_py, protocol_py.client.client, protocol_py.server, protocol_py.cli\n"
        "assert grpclib.server._abort is abort\n"
        "assert protocol.EventsProcessor.close is close\n"
        "assert protocol.Connection.create_stream is create\n"
        "assert '_body_repr' not in DataFrame.__dict__\n"
        "assert H2Connection._receive_headers_frame is headers\n"
        "assert selector_events.BaseSelectorEventLoop._accept_connection is accept\n"
        "assert _client.BoundAsyncStream.aclose is bound_close\n"
        "from protocol_py import _compat\n"
        "done = _compat.install()\n"
        "assert done == {p.module: True for p in _compat.PATCHES}, done\n"
        "assert protocol.EventsProcessor.close is not close\n"
        "assert protocol.Connection.create_stream is not create\n"
        "assert '_body_repr' in DataFrame.__dict__\n"
        "assert H2Connection._receive_headers_frame is not headers\n"
        "assert grpclib.server._abort is not abort\n"
        "assert _client.BoundAsyncStream.aclose is not bound_close\n"
        "assert _compat.install() == done\n"
    )


def test_constructing_a_client_installs_the_patches() -> None:
    run(
        "from hyperframe.frame import DataFrame\n"
        "from grpclib.client import Channel\n"
        "from protocol_py.client.client import ModelClient\n"
        "assert '_body_repr' not in DataFrame.__dict__\n"
        "ModelClient(Channel('127.0.0.1', 9))\n"
        "assert '_body_repr' in DataFrame.__dict__\n"
    )


def test_starting_a_server_installs_the_patches() -> None:
    run(
        "import asyncio\n"
        "from grpclib import protocol\n"
        "from protocol_py.providers.reference import ReferenceProvider\n"
        "from protocol_py.server import ModelServer\n"
        "close = protocol.EventsProcessor.close\n"
        "async def main():\n"
        "    server = ModelServer(ReferenceProvider())\n"
        "    await server.start('127.0.0.1', 0)\n"
        "    await server.shutdown(grace_period=0)\n"
        "asyncio.run(main())\n"
        "assert protocol.EventsProcessor.close is not close\n"
    )


# -- grpclib_goaway --------------------------------------------------------------------------


def test_grpclib_goaway_installs_on_the_pinned_grpclib() -> None:
    run(
        "from grpclib import protocol\n"
        "from protocol_py._compat import grpclib_goaway\n"
        "close = protocol.EventsProcessor.close\n"
        "assert grpclib_goaway.install()\n"
        "patched = protocol.EventsProcessor.close\n"
        "assert patched is not close and patched.__wrapped_by_protocol_py__\n"
        "assert grpclib_goaway.install() and protocol.EventsProcessor.close is patched\n"
    )


def test_grpclib_goaway_is_a_no_op_on_another_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    class Processor:  # a grpclib whose processor has no process_connection_terminated
        def close(self, reason: str = "Connection closed") -> None:
            pass

    original = Processor.close
    monkeypatch.setattr(
        grpclib_goaway, "_protocol", types.SimpleNamespace(EventsProcessor=Processor)
    )
    assert grpclib_goaway.install() is False
    assert Processor.close is original
    assert "process_connection_terminated" not in Processor.__dict__


# -- grpclib_closed_connection ---------------------------------------------------------------


def test_grpclib_closed_connection_installs_and_a_closed_connection_fails_as_lost() -> None:
    assert grpclib_closed_connection.install()
    assert grpclib_closed_connection.install()  # idempotent
    closed = protocol.Connection.__new__(protocol.Connection)  # no transport: closed
    with pytest.raises(StreamTerminatedError, match="Connection lost"):
        closed.create_stream()
    run(
        "from grpclib import protocol\n"
        "from protocol_py._compat import grpclib_closed_connection\n"
        "create = protocol.Connection.create_stream\n"
        "assert grpclib_closed_connection.install()\n"
        "assert protocol.Connection.create_stream is not create\n"
    )


def test_grpclib_closed_connection_is_a_no_op_on_another_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Connection:  # a grpclib whose connection creates streams some other way
        def open_stream(self) -> None:
            pass

    monkeypatch.setattr(
        grpclib_closed_connection, "_protocol", types.SimpleNamespace(Connection=Connection)
    )
    assert grpclib_closed_connection.install() is False
    assert set(vars(Connection)) >= {"open_stream"} and "create_stream" not in vars(Connection)
    monkeypatch.setattr(grpclib_closed_connection, "_protocol", types.SimpleNamespace())
    assert grpclib_closed_connection.install() is False


# -- hyperframe_frame_repr -------------------------------------------------------------------


def test_hyperframe_frame_repr_installs_on_the_pinned_hyperframe() -> None:
    assert hyperframe_frame_repr.install()
    assert frame.DataFrame.__dict__["_body_repr"] is hyperframe_frame_repr.data_frame_body_repr
    run(
        "from hyperframe.frame import DataFrame\n"
        "from protocol_py._compat import hyperframe_frame_repr as patch\n"
        "assert '_body_repr' not in DataFrame.__dict__\n"
        "assert patch.install()\n"
        "assert DataFrame.__dict__['_body_repr'] is patch.data_frame_body_repr\n"
        "assert patch.install()\n"
    )


def test_hyperframe_frame_repr_is_a_no_op_on_another_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class DataFrame:  # a hyperframe release with its own DATA frame repr
        def _body_repr(self) -> str:
            return "data=..."

    own = DataFrame.__dict__["_body_repr"]
    monkeypatch.setattr(hyperframe_frame_repr, "_frame", types.SimpleNamespace(DataFrame=DataFrame))
    assert hyperframe_frame_repr.install() is False
    assert DataFrame.__dict__["_body_repr"] is own

    class Bare:  # the shape it was written for, but no _raw_data_repr helper to reuse
        pass

    monkeypatch.setattr(hyperframe_frame_repr, "_frame", types.SimpleNamespace(DataFrame=Bare))
    monkeypatch.setattr(hyperframe_frame_repr, "_raw_data_repr", None)
    assert hyperframe_frame_repr.install() is False
    assert "_body_repr" not in Bare.__dict__
