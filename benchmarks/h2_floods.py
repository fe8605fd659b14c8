"""HTTP/2 control frame floods against ``protocol-py serve`` (a subprocess), with a Describe
every 100 ms from another client while each flood runs.

For each flood (PING, SETTINGS, PRIORITY, empty DATA, unearned WINDOW_UPDATE: frames written
as fast as the socket takes them, ACKs never read, from a child process that reconnects each
time the server closes its connection, for ``--seconds``), prints the frames sent, the
connections used, the GOAWAY error codes seen, the worst and median Describe latency during
the flood against the same figures with no flood (measured in the same run), and the server's
RSS before and after, and the server's log lines (tracebacks, WARNING lines: one per 10 s for
all flooding connections together). Figures are medians of ``--repeat`` runs.

Usage: ``.venv/bin/python benchmarks/h2_floods.py [--repeat 3] [--seconds 2]``
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from typing import Any

import grpc  # type: ignore[import-untyped]
import h2.config
import h2.connection
import h2.events
from _harness import rss, spawn_serve
from hyperframe.frame import (
    DataFrame,
    PingFrame,
    PriorityFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

SERVICE = "/model.v1.ModelService/"


def spawn(log: Any) -> tuple[subprocess.Popen[str], int]:
    return spawn_serve(stderr=log)


def frames(kind: str, count: int) -> bytes:
    made: list[bytes] = []
    for i in range(count):
        if kind == "PING":
            made.append(PingFrame(0, opaque_data=i.to_bytes(8, "big")).serialize())
        elif kind == "SETTINGS":
            made.append(
                SettingsFrame(0, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 65_535}).serialize()
            )
        elif kind == "PRIORITY":
            made.append(PriorityFrame(1, depends_on=0, stream_weight=16).serialize())
        elif kind == "WINDOW_UPDATE":  # unearned: the server sent no DATA
            made.append(WindowUpdateFrame(i % 2, window_increment=1).serialize())
        else:
            made.append(DataFrame(1, data=b"").serialize())
    return b"".join(made)


def flood_once(port: int, kind: str, end: float) -> tuple[int, str | None]:
    """One connection: one stream, then ``kind`` frames until the server closes it (or
    ``end``), never reading; frames sent and the GOAWAY code seen."""
    sock = socket.create_connection(("127.0.0.1", port))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.send_headers(
        1,
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", SERVICE + "StreamCompletion"),
            (":authority", f"127.0.0.1:{port}"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ],
    )
    sock.sendall(conn.data_to_send())
    batch = frames(kind, 500)
    sent = 0
    sock.settimeout(max(0.1, end - time.monotonic()))
    while time.monotonic() < end:
        try:
            sock.sendall(batch)
        except OSError:
            break
        sent += 500
    code = None
    sock.settimeout(1.0)
    try:
        while code is None:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.ConnectionTerminated):
                    code = event.error_code.name  # type: ignore[union-attr]
    except (OSError, h2.exceptions.ProtocolError):
        pass
    sock.close()
    return sent, code


def flood(port: int, kind: str, seconds: float, out: Any) -> None:
    """Child process: flood ``kind`` frames for ``seconds``, reconnecting each time the
    server closes the connection; report (frames sent, connections, GOAWAY codes seen)."""
    end = time.monotonic() + seconds
    sent, connections, codes = 0, 0, set()
    while time.monotonic() < end:
        more, code = flood_once(port, kind, end)
        sent += more
        connections += 1
        codes.add(str(code))
    out.put((sent, connections, sorted(codes)))


def describe_latencies(port: int, stop: threading.Event) -> list[float]:
    latencies: list[float] = []
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(SERVICE + "Describe")
        call(b"", timeout=10)
        while not stop.is_set():
            start = time.monotonic()
            call(b"", timeout=10)
            latencies.append(time.monotonic() - start)
            stop.wait(0.1)
    return latencies


def probe(port: int, seconds: float, kind: str | None) -> dict[str, Any]:
    stop = threading.Event()
    result: dict[str, list[float]] = {}
    thread = threading.Thread(target=lambda: result.setdefault("l", describe_latencies(port, stop)))
    thread.start()
    time.sleep(0.3)
    sent, connections, codes = 0, 0, []
    if kind is None:
        time.sleep(seconds)
    else:
        queue: Any = multiprocessing.Queue()
        child = multiprocessing.Process(target=flood, args=(port, kind, seconds, queue))
        child.start()
        sent, connections, codes = queue.get(timeout=seconds + 30)
        child.join()
    stop.set()
    thread.join()
    latencies = result["l"]
    return {
        "sent": sent,
        "connections": connections,
        "goaway": codes,
        "worst_ms": max(latencies) * 1000,
        "median_ms": statistics.median(latencies) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryFile("w+") as log:  # the server's stderr, counted at the end
        run(args.repeat, args.seconds, log)


def run(repeat: int, seconds: float, log: Any) -> None:
    proc, port = spawn(log)
    try:
        base_rss = rss(proc.pid)
        runs: dict[str, list[dict[str, Any]]] = {}
        for _ in range(repeat):
            for kind in (None, "PING", "SETTINGS", "PRIORITY", "empty DATA", "WINDOW_UPDATE"):
                runs.setdefault(kind or "no flood", []).append(probe(port, seconds, kind))
        baseline = statistics.median(r["worst_ms"] for r in runs["no flood"])
        print(f"server RSS before: {base_rss / 2**20:.1f} MiB")
        for name, results in runs.items():
            worst = statistics.median(r["worst_ms"] for r in results)
            print(
                f"{name:>13}: frames sent {statistics.median(r['sent'] for r in results):>8.0f}"
                f" on {statistics.median(r['connections'] for r in results):>4.0f} connections"
                f"  GOAWAY {results[0]['goaway']}"
                f"  Describe worst {worst:6.1f} ms (x{worst / baseline:.2f} of no flood)"
                f"  median {statistics.median(r['median_ms'] for r in results):5.1f} ms"
            )
        print(f"server RSS after: {rss(proc.pid) / 2**20:.1f} MiB")
        log.seek(0)
        lines = log.read().splitlines()
        tracebacks = sum(1 for line in lines if line.startswith("Traceback"))
        warnings = sum(1 for line in lines if " WARNING " in line)
        connections = sum(
            statistics.median(r["connections"] for r in results) for results in runs.values()
        )
        print(
            f"server log: {len(lines)} lines, {tracebacks} tracebacks, {warnings} WARNING lines "
            f"(flooding connections closed: about {connections * repeat:.0f})"
        )
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
