"""A throwaway certificate set for TLS tests: a test CA, a server and a client certificate it
issued, and a client certificate from a rogue CA the server does not trust; and a reference
server on a loopback port behind a given TLS context."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer

from .security import CA, Issued


@dataclass
class Pki:
    ca: CA
    server: Issued
    client: Issued
    rogue_client: Issued  # issued by rogue_ca, which the server does not trust
    rogue_ca: CA


def make_pki(directory: Path) -> Pki:
    """A fresh certificate set written under ``directory``."""
    ca = CA(directory, "test CA")
    rogue = CA(directory, "rogue CA")
    return Pki(
        ca,
        ca.issue("plugin server", client=False),
        ca.issue("kernel", client=True),
        rogue.issue("intruder", client=True),
        rogue,
    )


async def serve_reference(context: ssl.SSLContext) -> AsyncIterator[ModelServer]:
    """A reference server on a loopback port behind ``context``, shut down afterwards."""
    server = ModelServer(ReferenceProvider())
    await server.start("127.0.0.1", 0, ssl=context)
    try:
        yield server
    finally:
        await server.shutdown(grace_period=0)
