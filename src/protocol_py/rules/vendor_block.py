"""Vendor-owned blocks (protocol 1.2: ``content.v1.VendorBlock``).

Some vendors return content that has no canonical equivalent and that they need back unchanged
on a later turn: Anthropic's server tools (``server_tool_use`` and the ``*_tool_result`` blocks
the vendor executes itself) and its ``compaction`` blocks. The protocol keeps such a block as
``VendorBlock{vendor, block_type, data}``: the adapter family that produced it, the vendor's own
name for its kind, and the block's JSON text exactly as received. It arrives whole as a
``StreamEvent.vendor_block``, becomes a ``vendor_block`` ContentBlock at its position, and is
sent back verbatim, in place, to the same family; any other family drops it with a warning
(:func:`replayable_by`).

Rules (:func:`vendor_block_problems`; the stream checker prefixes the ids with
``stream.vendor_block.``, request validation with ``request.content.vendor_block.``):

- ``vendor_empty`` / ``vendor_invalid``: no vendor, or one longer than :data:`MAX_VENDOR_BYTES`
  or with characters outside ``[a-z0-9_]``
- ``block_type_empty`` / ``block_type_invalid``: no block type, or one longer than
  :data:`MAX_BLOCK_TYPE_BYTES` or with characters outside ``[A-Za-z0-9_.-]``
- ``data_empty`` / ``data_too_large``: no data, or more than :data:`MAX_DATA_BYTES`
- ``data_not_object``: data that does not start with ``{`` and end with ``}`` (the JSON text of
  an object; the rule does not parse it: the kernel never interprets the block)
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

from protocol_py_gen.content.v1 import VendorBlock

__all__ = [
    "MAX_BLOCK_TYPE_BYTES",
    "MAX_DATA_BYTES",
    "MAX_VENDOR_BYTES",
    "VendorBlockProblem",
    "replayable_by",
    "vendor_block_problems",
]

MAX_VENDOR_BYTES: Final = 64
"""Longest ``VendorBlock.vendor``, in bytes."""

MAX_BLOCK_TYPE_BYTES: Final = 128
"""Longest ``VendorBlock.block_type``, in bytes."""

MAX_DATA_BYTES: Final = 16 * 1024 * 1024
"""Largest ``VendorBlock.data``, in bytes (16 MiB: one SSE event of the adapters holds at most
as much, ``protocol_py.providers.http.sse.MAX_SSE_EVENT_BYTES``)."""

_VENDOR = re.compile(r"[a-z0-9_]+")
_BLOCK_TYPE = re.compile(r"[A-Za-z0-9_.\-]+")
_SHOWN_CHARS: Final = 40
"""How much of a bad name an error message quotes, in characters."""


class VendorBlockProblem(NamedTuple):
    """One broken rule: the field it concerns (``vendor``, ``block_type`` or ``data``), the rule
    suffix (see the module docstring) and a message quoting at most 40 characters of a name."""

    field: str
    rule: str
    message: str


def _shown(name: str) -> str:
    if len(name) <= _SHOWN_CHARS:
        return repr(name)
    return repr(name[:_SHOWN_CHARS]) + f"... ({len(name)} characters)"


def vendor_block_problems(block: VendorBlock) -> list[VendorBlockProblem]:
    """Check one vendor block.

    Returns:
        Every problem, in field order; empty when the block is valid. O(1) in the size of
        ``data`` (its length and its first and last byte are read, never its content).
    """
    problems: list[VendorBlockProblem] = []
    vendor, block_type, data = block.vendor, block.block_type, block.data
    if not vendor:
        problems.append(VendorBlockProblem("vendor", "vendor_empty", "vendor is empty"))
    elif len(vendor.encode()) > MAX_VENDOR_BYTES or not _VENDOR.fullmatch(vendor):
        problems.append(
            VendorBlockProblem(
                "vendor",
                "vendor_invalid",
                f"vendor {_shown(vendor)} must be at most {MAX_VENDOR_BYTES} bytes of [a-z0-9_]",
            )
        )
    if not block_type:
        problems.append(VendorBlockProblem("block_type", "block_type_empty", "block_type is empty"))
    elif len(block_type.encode()) > MAX_BLOCK_TYPE_BYTES or not _BLOCK_TYPE.fullmatch(block_type):
        problems.append(
            VendorBlockProblem(
                "block_type",
                "block_type_invalid",
                f"block_type {_shown(block_type)} must be at most {MAX_BLOCK_TYPE_BYTES} bytes "
                "of [A-Za-z0-9_.-]",
            )
        )
    if not data:
        problems.append(VendorBlockProblem("data", "data_empty", "data is empty"))
    elif len(data) > MAX_DATA_BYTES:
        problems.append(
            VendorBlockProblem(
                "data",
                "data_too_large",
                f"data is {len(data)} bytes, above the limit of {MAX_DATA_BYTES}",
            )
        )
    elif data[:1] != b"{" or data[-1:] != b"}":
        problems.append(
            VendorBlockProblem(
                "data",
                "data_not_object",
                "data must be the JSON text of an object (starting with '{' and ending with '}')",
            )
        )
    return problems


def replayable_by(block: VendorBlock, family: str) -> bool:
    """Whether an adapter of ``family`` sends ``block`` back (the replay rule of
    ``content.v1.VendorBlock``): True only for the family that produced it; every other family
    drops it (and logs a warning naming ``vendor`` and ``block_type``)."""
    return block.vendor == family
