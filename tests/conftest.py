"""Shared pytest fixtures.

``running``, ``client`` and ``cli_server`` (defined in :mod:`tests.support.servers`): an
in-process server on the reference provider, a grpclib client of it, and the real console script
serving the reference provider.

``upb``: google's protobuf classes (the upb runtime of the ``protobuf`` package) compiled at test
time with ``grpc_tools.protoc`` from the same ``proto/`` sources as the committed betterproto2
stubs. They are the reference encoder/decoder of the interop tests; they exist only inside the
test session (a temporary directory), never in the package.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import grpc_tools
import pytest
from grpc_tools import protoc

from .support.servers import cli_server, client, running

__all__ = ["cli_server", "client", "running"]

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "proto"


@dataclass(frozen=True)
class UpbClasses:
    """The upb message classes compiled from ``proto/``, looked up by proto full name."""

    modules: dict[str, ModuleType]

    def message(self, full_name: str) -> type:
        """The upb class of a message, for example ``message("model.v1.StreamEvent")``.

        Raises:
            KeyError: no compiled file defines that message.
        """
        package, _, name = full_name.rpartition(".")
        for module in self.modules.values():
            file = module.DESCRIPTOR
            if file.package == package and name in file.message_types_by_name:
                cls: type = getattr(module, name)
                return cls
        raise KeyError(full_name)


def compile_upb(out_dir: Path) -> list[str]:
    """Compile every ``.proto`` under ``proto/`` to ``*_pb2.py`` in ``out_dir``.

    Returns the module names (``model.v1.types_pb2``, ...). Raises RuntimeError when protoc fails.
    """
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    sources = sorted(p.relative_to(PROTO_ROOT).as_posix() for p in PROTO_ROOT.rglob("*.proto"))
    args = ["protoc", f"-I{PROTO_ROOT}", f"-I{well_known}", f"--python_out={out_dir}", *sources]
    if protoc.main(args) != 0:
        raise RuntimeError(f"grpc_tools.protoc failed: {' '.join(args)}")
    return [source.removesuffix(".proto").replace("/", ".") + "_pb2" for source in sources]


@pytest.fixture(scope="session")
def upb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpbClasses]:
    """google's upb classes for every proto file, compiled once per session."""
    out_dir = tmp_path_factory.mktemp("upb")
    names = compile_upb(out_dir)
    sys.path.insert(0, str(out_dir))
    try:
        modules = {name: importlib.import_module(name) for name in names}
    finally:
        sys.path.remove(str(out_dir))
    yield UpbClasses(modules)


class _SecretWatch(logging.Handler):
    """Sees every log record that reaches the root logger and notes any that holds a secret the
    vendor adapters registered (API keys and their encoded forms, ``remember_secrets``)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.leaks: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        from protocol_py.providers.http import errors as _http  # noqa: PLC0415

        secrets = list(_http._remembered)
        if not secrets:
            return
        try:
            text = record.getMessage()
        except Exception:  # a malformed record is not this check's business
            return
        for secret in secrets:
            if secret in text:
                self.leaks.append(f"{record.name} {record.levelname}: holds {secret[:3]}...")
                return


@pytest.fixture(autouse=True)
def no_registered_secret_in_any_log_record() -> Iterator[None]:
    """The API key never appears in a log line, at any level, in the whole suite."""
    watch = _SecretWatch()
    root = logging.getLogger()
    root.addHandler(watch)
    try:
        yield
    finally:
        root.removeHandler(watch)
    assert not watch.leaks, watch.leaks
