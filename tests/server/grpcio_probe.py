"""Standard grpcio clients (grpcio-health-checking, grpcio-reflection) run against a server.

Run as a separate process by the tests: grpclib's health/reflection ``*_pb2`` modules and
grpcio's register the same proto names in protobuf's default pool, so the two cannot be imported
into one interpreter. Prints one JSON object on stdout.

Usage: python grpcio_probe.py {health|reflection|c04|c02} HOST:PORT [SERVER_PID]
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any

import grpc
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

SERVICE = "model.v1.ModelService"


def status_name(value: int) -> str:
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(value))


def check(stub: Any, service: str) -> str:
    try:
        reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
    except grpc.RpcError as exc:
        return f"rpc:{exc.code().name}"
    return status_name(reply.status)


def health(address: str) -> dict[str, Any]:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return {
            "overall": check(stub, ""),
            "service": check(stub, SERVICE),
            "unknown": check(stub, "no.such.Service"),
        }


def reflection(address: str) -> dict[str, Any]:
    with grpc.insecure_channel(address) as channel:
        db = ProtoReflectionDescriptorDatabase(channel)
        services = sorted(db.get_services())
        pool = DescriptorPool(db)
        svc = pool.FindServiceByName(SERVICE)
        methods = {
            m.name: [m.input_type.full_name, m.output_type.full_name, m.server_streaming]
            for m in svc.methods
        }
        event = pool.FindMessageTypeByName("model.v1.StreamEvent")
        health_svc = pool.FindServiceByName("grpc.health.v1.Health")
        return {
            "services": services,
            "methods": methods,
            "stream_event_oneof": [f.name for f in event.oneofs_by_name["event"].fields],
            "health_methods": sorted(m.name for m in health_svc.methods),
        }


class Watcher(threading.Thread):
    """Reads Health.Watch('') and records (monotonic time, status) and how it ended."""

    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        self.channel = grpc.insecure_channel(address)
        self.updates: list[tuple[float, str]] = []
        self.ended: tuple[float, str] | None = None
        self.first = threading.Event()

    def run(self) -> None:
        stub = health_pb2_grpc.HealthStub(self.channel)
        try:
            for reply in stub.Watch(health_pb2.HealthCheckRequest(service="")):
                self.updates.append((time.monotonic(), status_name(reply.status)))
                self.first.set()
            self.ended = (time.monotonic(), "OK")
        except grpc.RpcError as exc:
            self.ended = (time.monotonic(), exc.code().name)
        self.first.set()


def c04(address: str, pid: int) -> dict[str, Any]:
    result: dict[str, Any] = {"checks": health(address)}
    watcher = Watcher(address)
    watcher.start()
    watcher.first.wait(5)
    result["watch_first"] = watcher.updates[0][1] if watcher.updates else None
    third = grpc.insecure_channel(address)
    stub3 = health_pb2_grpc.HealthStub(third)
    result["third_before"] = check(stub3, "")
    sent = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    answers = []
    while time.monotonic() - sent < 8:
        answer = check(stub3, "")
        answers.append(answer)
        if answer.startswith("rpc:"):
            break
        time.sleep(0.05)
    watcher.join(3)
    result["checks_after_sigterm"] = answers
    result["watch_after"] = [(round(t - sent, 3), s) for t, s in watcher.updates if t >= sent]
    result["watch_ended"] = (
        None if watcher.ended is None else [round(watcher.ended[0] - sent, 3), watcher.ended[1]]
    )
    third.close()
    watcher.channel.close()
    return result


def c02(address: str) -> dict[str, Any]:
    """Client 1 (one GetCapabilities, channel kept open) and client 2 (Watch); then wait for
    ``GO`` on stdin (the test sends SIGTERM meanwhile) and call client 1 again."""
    channel1 = grpc.insecure_channel(address)
    get_caps = channel1.unary_unary(
        f"/{SERVICE}/GetCapabilities",
        request_serializer=lambda _: b"",
        response_deserializer=lambda data: data,
    )
    first = get_caps(None, timeout=5)
    watcher = Watcher(address)
    watcher.start()
    watcher.first.wait(5)
    print("READY", flush=True)
    sys.stdin.readline()
    released = time.monotonic()
    try:
        get_caps(None, timeout=2)
        next_rpc = "OK"
    except grpc.RpcError as exc:
        next_rpc = exc.code().name
    watcher.join(3)
    return {
        "first_bytes": len(first),
        "watch_updates": [s for _, s in watcher.updates],
        "watch_ended": None if watcher.ended is None else watcher.ended[1],
        "watch_ended_before_go": watcher.ended is not None and watcher.ended[0] <= released + 0.01,
        "client_1_next_rpc": next_rpc,
    }


def main() -> None:
    command, address = sys.argv[1], sys.argv[2]
    if command == "health":
        out = health(address)
    elif command == "reflection":
        out = reflection(address)
    elif command == "c04":
        out = c04(address, int(sys.argv[3]))
    elif command == "c02":
        out = c02(address)
    else:
        raise SystemExit(f"unknown command {command}")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
