"""The descriptor image and the DescriptorPool behind server reflection and strict decoding."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from google.protobuf import (  # type: ignore[import-untyped]
    descriptor_pb2,
    descriptor_pool,
)
from grpclib.health.v1 import health_pb2
from grpclib.reflection.v1 import reflection_pb2

import protocol_py_gen

log = logging.getLogger("protocol_py.server")


def find_descriptor_image() -> Path | None:
    """Locate the buf image ``protocol.binpb`` (env ``PROTOCOL_PY_DESCRIPTOR``, then the
    generated package's directory, then ``gen/descriptor`` of a source checkout)."""
    candidates = []
    env = os.environ.get("PROTOCOL_PY_DESCRIPTOR")
    if env:
        candidates.append(Path(env))
    package_dir = Path(protocol_py_gen.__file__).resolve().parent
    candidates.append(package_dir / "descriptor" / "protocol.binpb")
    candidates.append(package_dir.parent.parent / "descriptor" / "protocol.binpb")
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    return None


def build_descriptor_pool(image: Path | None = None) -> Any | None:
    """A protobuf DescriptorPool holding the buf image's files plus grpclib's health and
    reflection descriptors, for ServerReflection; None when no image is found (logged)."""
    path = image or find_descriptor_image()
    if path is None:
        log.warning("descriptor image protocol.binpb not found: server reflection disabled")
        return None
    files = descriptor_pb2.FileDescriptorSet.FromString(path.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    seen: set[str] = set()
    for proto in files.file:
        pool.Add(proto)
        seen.add(proto.name)
    for module in (health_pb2, reflection_pb2):
        proto = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        if proto.name not in seen:
            pool.Add(proto)
    return pool
