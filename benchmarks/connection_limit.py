"""Idle connections against a server with few file descriptors: ``protocol-py serve`` (a
subprocess, soft ``RLIMIT_NOFILE`` ``--nofile``, default 256) holding ``--idle`` (300) idle
HTTP/2 connections opened from this process, while new clients (a fresh grpcio channel each:
connect, then one Describe) keep arriving.

Three scenarios: no idle connections (the baseline, measured in the same run); the default
connection limit (the soft limit minus 128: 128 at 256), where the oldest idle connections are
closed to make room; and ``--max-connections 5000``, above what the descriptors allow, so
``accept()`` fails with EMFILE and backs off. For each: the median and worst time a new client
takes to get its Describe answered, against the baseline, how many idle connections the
server closed, and the server's log (lines, WARNING lines, tracebacks). Figures are medians of
``--repeat`` runs.

Usage: ``.venv/bin/python benchmarks/connection_limit.py [--repeat 3] [--clients 20]``
"""

from __future__ import annotations

import argparse
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import grpc  # type: ignore[import-untyped]
from hyperframe.frame import SettingsFrame

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + SettingsFrame(0).serialize()
DESCRIBE = "/model.v1.ModelService/Describe"


def spawn(nofile: int, extra: list[str], log: Any) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        ["/bin/sh", "-c", f'ulimit -n {nofile} && exec "$0" "$@"', sys.executable, "-m",
         "protocol_py.cli", "serve", "--handshake", "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    if not ready:
        raise SystemExit("no handshake line")
    return proc, int(proc.stdout.readline().split("|")[2].rpartition(":")[2])


def new_client(port: int) -> float:
    """Seconds from a new channel to its Describe answered."""
    start = time.monotonic()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        channel.unary_unary(DESCRIBE)(b"", timeout=30)
    return time.monotonic() - start


def closed_count(sockets: list[socket.socket]) -> int:
    closed = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    closed += 1
                    break
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            closed += 1
    return closed


def scenario(nofile: int, idle: int, clients: int, extra: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryFile("w+") as log:
        proc, port = spawn(nofile, extra, log)
        held: list[socket.socket] = []
        try:
            new_client(port)  # warm-up
            for _ in range(idle):
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                sock.sendall(PREFACE)
                held.append(sock)
            latencies = [new_client(port) for _ in range(clients)]
            time.sleep(0.5)
            closed = closed_count(held)
        finally:
            for sock in held:
                sock.close()
            proc.terminate()
            proc.wait(30)
        log.seek(0)
        lines = log.read().splitlines()
    return {
        "median_ms": statistics.median(latencies) * 1000,
        "worst_ms": max(latencies) * 1000,
        "closed": closed,
        "lines": len(lines),
        "warnings": sum(1 for line in lines if " WARNING " in line),
        "tracebacks": sum(1 for line in lines if line.startswith("Traceback")),
        "resource": sum(1 for line in lines if "out of system resource" in line),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--idle", type=int, default=300)
    parser.add_argument("--nofile", type=int, default=256)
    args = parser.parse_args()
    cases = {
        "no idle connections": (0, []),
        "default limit": (args.idle, []),
        "--max-connections 5000 (EMFILE)": (args.idle, ["--max-connections", "5000"]),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in cases}
    for _ in range(args.repeat):
        for name, (idle, extra) in cases.items():
            runs[name].append(scenario(args.nofile, idle, args.clients, extra))
    baseline = statistics.median(r["median_ms"] for r in runs["no idle connections"])
    print(f"RLIMIT_NOFILE {args.nofile}, {args.idle} idle connections, {args.clients} new clients")
    for name, results in runs.items():

        def median(key: str, results: list[dict[str, Any]] = results) -> float:
            return float(statistics.median(r[key] for r in results))

        print(
            f"{name:>32}: new client median {median('median_ms'):6.1f} ms "
            f"(x{median('median_ms') / baseline:.2f}), worst {median('worst_ms'):6.1f} ms; "
            f"idle closed {median('closed'):4.0f}; log {median('lines'):4.0f} lines, "
            f"{median('warnings'):.0f} WARNING, {median('tracebacks'):.0f} tracebacks, "
            f"{median('resource'):.0f} 'out of system resource'"
        )


if __name__ == "__main__":
    main()
