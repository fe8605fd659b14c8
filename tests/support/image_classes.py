"""google.protobuf (upb) message classes built from a buf image at run time: how a kernel
compiled against one release sees the wire (used by the packaging and compatibility tests)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def classes_from_image(image: bytes | Path) -> Callable[[str], Any]:
    """A lookup ``name -> message class`` ("model.v1.StreamEvent") over a fresh descriptor pool
    holding every file of the image (a buf image parses as a FileDescriptorSet; its files come
    dependencies first)."""
    data = image.read_bytes() if isinstance(image, Path) else image
    files = descriptor_pb2.FileDescriptorSet.FromString(data)
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)

    def message(name: str) -> Any:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))

    message.pool = pool  # type: ignore[attr-defined]
    return message
