"""Fixtures shared by the TLS tests: a throwaway certificate set and a reference server behind
mutual TLS with it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from protocol_py.server import ModelServer
from protocol_py.transport.tls import server_context

from ..support.pki import Pki, make_pki, serve_reference


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@pytest.fixture
async def mtls_server(pki: Pki) -> AsyncIterator[ModelServer]:
    context = server_context(str(pki.server.cert), str(pki.server.key), str(pki.ca.cert))
    async for server in serve_reference(context):
        yield server
