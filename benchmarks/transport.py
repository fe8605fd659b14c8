"""Benchmark: the cost of each transport (TCP, unix socket, TLS, automatic mutual TLS).

Usage: ``.venv/bin/python benchmarks/transport.py [REPEATS] [CALLS]`` (default REPEATS = 7,
CALLS = 200).

One in-process reference server per transport (AutoMTLS-style: pinned client certificate),
measured interleaved. For each prints, as medians of REPEATS runs and as a ratio against
plaintext TCP measured in the same run: ``connect`` (a fresh client's first
Describe: connection set-up, TLS handshake included, plus one RPC) and ``rpc`` (one Describe on
an open connection, the median over CALLS calls). Then the start-up of a launched plugin
(``protocol_py.transport.launch``, the real console script, up to the first Describe) with and
without
AutoMTLS.
"""

from __future__ import annotations

import asyncio
import ssl
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py.transport.launch import launch
from protocol_py.transport.listen import make_private_socket_path
from protocol_py.transport.tls import (
    auto_mtls_server_context,
    generate_certificate,
    pinned_client_context,
)

CONSOLE_SCRIPT = str(Path(sys.executable).parent / "protocol-py")


async def connect_once(address: str, context: ssl.SSLContext | None) -> float:
    """Seconds for a fresh client's first Describe (connection, TLS handshake, one RPC)."""
    t0 = time.perf_counter()
    async with ModelClient.connect(address, ssl=context, server_hostname="localhost") as client:
        await client.describe(timeout=30)
    return time.perf_counter() - t0


async def rpc_batch(client: ModelClient, calls: int) -> float:
    """Seconds per Describe over ``calls`` calls on an open connection."""
    t0 = time.perf_counter()
    for _ in range(calls):
        await client.describe(timeout=30)
    return (time.perf_counter() - t0) / calls


async def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    kernel = generate_certificate()
    server_ctx, server_pair = auto_mtls_server_context(kernel.cert_pem)
    client_ctx = pinned_client_context(server_pair.cert_der, kernel)
    pinned = {"ssl": server_ctx, "client_certificate": kernel.cert_der}
    setups: list[tuple[str, dict[str, Any], ssl.SSLContext | None]] = [
        ("tcp", {}, None),
        ("unix", {"path": make_private_socket_path(), "owns_socket_dir": True}, None),
        ("tcp+mtls", pinned, client_ctx),
        (
            "unix+mtls",
            {"path": make_private_socket_path(), "owns_socket_dir": True, **pinned},
            client_ctx,
        ),
    ]
    servers, clients = [], []
    for _, options, context in setups:
        server = ModelServer(ReferenceProvider())
        await server.start("127.0.0.1", 0, **options)
        servers.append(server)
        clients.append(
            ModelClient.connect(server.address, ssl=context, server_hostname="localhost")
        )
    connects: list[list[float]] = [[] for _ in setups]
    rpcs: list[list[float]] = [[] for _ in setups]
    try:
        for client in clients:
            await client.describe(timeout=30)
        for _ in range(repeats):  # interleaved, so machine load hits every transport alike
            for k, (_, _, context) in enumerate(setups):
                connects[k].append(await connect_once(servers[k].address, context))
                rpcs[k].append(await rpc_batch(clients[k], calls))
    finally:
        for client in clients:
            client.close()
        for server in servers:
            await server.shutdown(grace_period=0)
    print(f"transport benchmark: median of {repeats} interleaved runs, {calls} Describe calls each")
    base_connect, base_rpc = statistics.median(connects[0]), statistics.median(rpcs[0])
    for k, (name, _, _) in enumerate(setups):
        connect, rpc = statistics.median(connects[k]), statistics.median(rpcs[k])
        print(
            f"  {name:10s} connect {connect * 1e3:7.2f} ms (x{connect / base_connect:.2f})"
            f"   rpc {rpc * 1e6:7.1f} us (x{rpc / base_rpc:.2f})"
        )
    launches: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(max(3, repeats // 2)):
        for mtls in (False, True):
            t0 = time.perf_counter()
            argv = [CONSOLE_SCRIPT, "serve", "--handshake"]
            async with launch(argv, auto_mtls=mtls, stderr=subprocess.DEVNULL) as plugin:
                await plugin.client.describe(timeout=30)
                launches[mtls].append(time.perf_counter() - t0)
    plain, auto = statistics.median(launches[False]), statistics.median(launches[True])
    print(
        f"  launch to first Describe: plaintext {plain * 1e3:.0f} ms, AutoMTLS {auto * 1e3:.0f} ms"
        f" (x{auto / plain:.2f}), median of {len(launches[True])}"
    )


if __name__ == "__main__":
    asyncio.run(main())
