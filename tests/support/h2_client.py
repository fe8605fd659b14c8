"""The tests' raw HTTP/2 gRPC client (the ``h2`` package), for frames and sequences no gRPC
client sends, and the request headers and message framing it uses."""

from __future__ import annotations

import socket
import time
from typing import Any

import h2.config
import h2.connection
import h2.events

SERVICE = "/model.v1.ModelService/"


def grpc_frame(message: bytes) -> bytes:
    """One gRPC length-prefixed message (uncompressed)."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


def request_headers(port: int, method: str, timeout: str | None = None) -> list[tuple[str, str]]:
    """The HTTP/2 request headers of a gRPC call of ``method`` (a ModelService method name or a
    full ``/package.Service/Method`` path), with a ``grpc-timeout`` when ``timeout`` is given."""
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", SERVICE + method if not method.startswith("/") else method),
        (":authority", f"127.0.0.1:{port}"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    if timeout is not None:
        headers.append(("grpc-timeout", timeout))
    return headers


class RawH2:
    """The suite's raw HTTP/2 gRPC client (the ``h2`` package) over a blocking socket: it sends
    what grpcio never would (partial requests, unframed bytes, HEADERS+DATA+RST_STREAM in one
    write) and, with ``auto_ack=False``, never gives flow-control window back (a peer that
    reads nothing). Each stream's state: ``headers`` (response headers and trailers merged),
    ``response`` and ``trailers`` apart, ``data``, ``ended`` and ``reset`` (the error code)."""

    def __init__(self, port: int, *, auto_ack: bool = True, timeout: float = 5.0) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.auto_ack = auto_ack
        self.conn.initiate_connection()
        self.flush()
        self.terminated: h2.events.ConnectionTerminated | None = None
        self.closed = False
        self.streams: dict[int, dict[str, Any]] = {}
        # wait for the server's preface (SETTINGS and the 4 MiB connection window)
        deadline = time.monotonic() + 5
        while self.conn.outbound_flow_control_window <= 65_535 and time.monotonic() < deadline:
            if not self.pump(0.05):
                break

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def open(
        self,
        method: str,
        body: bytes | None = None,
        *,
        end: bool = True,
        timeout: str | None = None,
        flush: bool = True,
        extra_headers: list[tuple[str, str]] | None = None,
    ) -> int:
        """Start a call; ``body`` (already framed, or any bytes) is sent after HEADERS, with
        END_STREAM when ``end``."""
        stream_id: int = self.conn.get_next_available_stream_id()
        self.streams[stream_id] = {
            "headers": {},
            "response": {},
            "trailers": {},
            "data": b"",
            "reset": None,
            "ended": False,
        }
        headers = request_headers(self.port, method, timeout)
        self.conn.send_headers(stream_id, [*headers, *(extra_headers or [])])
        if body is not None:
            self.send(stream_id, body, end=end, flush=False)
        if flush:
            self.flush()
        return stream_id

    def send(self, stream_id: int, data: bytes, *, end: bool = False, flush: bool = True) -> None:
        """Send ``data`` as DATA frames of the largest size the server allows."""
        size = self.conn.max_outbound_frame_size
        for start in range(0, max(len(data), 1), size):
            last = start + size >= len(data)
            self.conn.send_data(stream_id, data[start : start + size], end_stream=end and last)
        if flush:
            self.flush()

    def pump(self, wait: float) -> bool:
        """Read and process what arrives within ``wait`` seconds; False once the socket is
        closed."""
        self.sock.settimeout(max(0.001, wait))
        try:
            chunk = self.sock.recv(1 << 20)
        except TimeoutError:
            return True
        except OSError:
            self.closed = True
            return False
        if not chunk:
            self.closed = True
            return False
        for event in self.conn.receive_data(chunk):
            self._record(event)
        self.flush()
        return True

    def sync(self, limit: float = 10.0) -> bool:
        """Send a PING and pump until its ACK arrives (or ``limit`` seconds pass): the server
        handles a connection's frames in order, so everything sent before has been processed.
        True when the ACK arrived."""
        self._ping_acks = getattr(self, "_ping_acks", 0)
        before = self._ping_acks
        self.conn.ping(b"syncsync")
        self.flush()
        deadline = time.monotonic() + limit
        while self._ping_acks == before and time.monotonic() < deadline:
            if not self.pump(min(0.05, max(0.001, deadline - time.monotonic()))):
                return False
        return self._ping_acks > before

    def _record(self, event: Any) -> None:
        if isinstance(event, h2.events.PingAckReceived):
            self._ping_acks = getattr(self, "_ping_acks", 0) + 1
            return
        if isinstance(event, h2.events.ConnectionTerminated):
            self.terminated = event
            return
        state = self.streams.get(getattr(event, "stream_id", 0) or 0)
        if state is None:
            return
        if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
            state["headers"].update(dict(event.headers))
            part = "response" if isinstance(event, h2.events.ResponseReceived) else "trailers"
            state[part].update(dict(event.headers))
        elif isinstance(event, h2.events.DataReceived):
            state["data"] += event.data
            if self.auto_ack:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            state["ended"] = True
        elif isinstance(event, h2.events.StreamReset):
            state["reset"] = event.error_code

    def outcome(self, stream_id: int, limit: float = 5.0) -> dict[str, Any]:
        """Pump until the stream ends or is reset (or ``limit`` seconds pass); its state."""
        deadline = time.monotonic() + limit
        state = self.streams[stream_id]
        while time.monotonic() < deadline and not (state["ended"] or state["reset"] is not None):
            if not self.pump(deadline - time.monotonic()):
                break
        return state

    def close(self) -> None:
        with_socket = self.sock
        with_socket.close()
