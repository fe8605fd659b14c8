"""Shared pieces of request translation: body serialization, effort ladders, content helpers.

Prefix-stable serialization: a request body is a ``dict`` built in a fixed key order with
``messages`` as its LAST key, serialized with :func:`dump_body` (no whitespace, no key sorting,
UTF-8). For the same conversation, turn N's body up to the end of its last message is then a
byte prefix of turn N+1's body, which keeps vendor prompt caches warm.

Effort ladder collapse (GenerationParams.thinking_effort onto a vendor's own ladder): the
portable order is ``none < minimal < low < medium < high < xhigh < max``. A level the vendor
ladder has is sent as is. Otherwise the nearest vendor level at or above it in that order is
sent; above the vendor's top level, the top level. Levels outside the portable order are sent
verbatim (the model declared them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import betterproto2

from protocol_py.codec.structs import from_struct
from protocol_py.errors import InvalidValueError
from protocol_py.rules.version_gate import parse_protocol_version
from protocol_py.version import PROTOCOL_MAJOR
from protocol_py_gen.content.v1 import ContentBlock, ContextSection
from protocol_py_gen.model.v1 import CacheBreakpoint, ModelSpec, StreamCompletionRequest

__all__ = [
    "PORTABLE_EFFORT_ORDER",
    "CacheTargets",
    "check_stop_sequences",
    "collapse_effort",
    "context_texts",
    "document_text",
    "dump_body",
    "is_pdf",
    "is_text_document",
    "kernel_speaks",
    "merge_provider_options",
    "stored_json",
]

PORTABLE_EFFORT_ORDER = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
"""The portable effort order used to collapse a ladder onto a shorter vendor ladder."""

_RESERVED_OPTION_KEYS = frozenset({"messages", "stream", "model"})


def dump_body(body: Mapping[str, Any]) -> bytes:
    """Serialize a request body deterministically (insertion order, compact, UTF-8)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode(
        "utf-8"
    )


def collapse_effort(level: str, vendor_levels: Sequence[str]) -> str:
    """Map a requested effort level onto the vendor's ladder (see the module docstring).

    Args:
        level: The requested level (one of the model's declared levels).
        vendor_levels: The vendor's accepted levels, lowest first. Empty: send ``level``.
    """
    if not vendor_levels or level in vendor_levels or level not in PORTABLE_EFFORT_ORDER:
        return level
    rank = PORTABLE_EFFORT_ORDER.index(level)
    ranked = [v for v in vendor_levels if v in PORTABLE_EFFORT_ORDER]
    for candidate in sorted(ranked, key=PORTABLE_EFFORT_ORDER.index):
        if PORTABLE_EFFORT_ORDER.index(candidate) >= rank:
            return candidate
    return max(ranked, key=PORTABLE_EFFORT_ORDER.index) if ranked else level


def block_case(block: ContentBlock) -> tuple[str, Any]:
    """The oneof case of a content block, or raise InvalidValueError when none is set."""
    name, value = betterproto2.which_one_of(block, "block")
    if not name:
        raise InvalidValueError("content block has no member set")
    return name, value


def context_texts(sections: Sequence[ContextSection]) -> list[str]:
    """The text of every text block of the assembled context, in chain order.

    Raises:
        InvalidValueError: a section holds a non-text block (the system slot takes text only).
    """
    out: list[str] = []
    for i, section in enumerate(sections):
        for j, block in enumerate(section.content):
            name, value = block_case(block)
            if name != "text":
                raise InvalidValueError(
                    f"assembled_context[{i}].content[{j}]: {name} blocks cannot go in the "
                    "system slot (rule adapter.system.text_only)"
                )
            if value.text:
                out.append(value.text)
    return out


class CacheTargets:
    """Where the request's cache breakpoints sit (spec: cache_breakpoints).

    Attributes:
        after_context: A breakpoint after the whole assembled context.
        after_tools: A breakpoint after the tool list.
        message_indexes: Messages after which a breakpoint sits.
        ttl_seconds: The lifetime requested at each target (protocol 1.2
            ``CacheBreakpoint.ttl_seconds``): keys ``"context"``, ``"tools"`` or a message
            index; the longest when several breakpoints share a target; absent when none asks.
    """

    def __init__(self, breakpoints: Sequence[CacheBreakpoint], *, enabled: bool) -> None:
        self.after_context = False
        self.after_tools = False
        self.message_indexes: set[int] = set()
        self.ttl_seconds: dict[str | int, int] = {}
        if not enabled:
            return  # the model declares no explicit markers: ignore them (never fail)
        for bp in breakpoints:
            name, value = betterproto2.which_one_of(bp, "position")
            key: str | int
            if name == "after_assembled_context":
                self.after_context = True
                key = "context"
            elif name == "after_tools":
                self.after_tools = True
                key = "tools"
            elif name == "after_message_index" and isinstance(value, int):
                self.message_indexes.add(value)
                key = value
            else:
                continue  # a position of a newer protocol minor: no marker
            if bp.ttl_seconds is not None:
                self.ttl_seconds[key] = max(self.ttl_seconds.get(key, 0), bp.ttl_seconds)


def check_stop_sequences(request: StreamCompletionRequest, spec: ModelSpec) -> None:
    """Refuse stop sequences the model declares it does not take (protocol 1.2), before any
    vendor call: dropping them would change what was asked.

    Raises:
        InvalidValueError: ``params.stop_sequences`` is non-empty and
            ``spec.supports_stop_sequences`` is false (rule
            ``request.params.stop_sequences.unsupported``), or longer than
            ``spec.max_stop_sequences`` (rule ``request.params.stop_sequences.too_many``).
    """
    params = request.params
    if params is None or not params.stop_sequences:
        return
    if spec.supports_stop_sequences is False:
        raise InvalidValueError(
            f"params.stop_sequences: model {spec.id!r} does not accept stop sequences "
            "(rule request.params.stop_sequences.unsupported)",
            path="params.stop_sequences",
            rule="request.params.stop_sequences.unsupported",
        )
    limit = spec.max_stop_sequences
    if limit is not None and len(params.stop_sequences) > limit:
        raise InvalidValueError(
            f"params.stop_sequences: {len(params.stop_sequences)} stop sequences, model "
            f"{spec.id!r} accepts at most {limit} (rule request.params.stop_sequences.too_many)",
            path="params.stop_sequences",
            rule="request.params.stop_sequences.too_many",
        )


def tool_input(block_input: Any, path: str) -> dict[str, Any]:
    """A tool_use block's input as a JSON object (an absent Struct is ``{}``)."""
    return dict(from_struct(block_input, path=path)) if block_input is not None else {}


def merge_provider_options(body: dict[str, Any], request: StreamCompletionRequest) -> None:
    """Merge ``provider_options`` into the body, shallowly and untouched (keys it names win).

    Raises:
        InvalidValueError: it names ``messages``, ``stream`` or ``model``, which the adapter owns.
    """
    if request.provider_options is None:
        return
    options = from_struct(request.provider_options, path="provider_options")
    for key, value in options.items():
        if key in _RESERVED_OPTION_KEYS:
            raise InvalidValueError(
                f"provider_options.{key}: the adapter sets this field "
                "(rule adapter.provider_options.reserved)"
            )
        body[key] = value


_TEXT_APPLICATION_TYPES = frozenset(
    {"application/json", "application/xml", "application/x-yaml", "application/yaml"}
)


def _base_media_type(media_type: str) -> str:
    return media_type.split(";", 1)[0].strip().lower()


def is_pdf(media_type: str) -> bool:
    """Whether a document's media type is PDF (``application/pdf``, parameters ignored)."""
    return _base_media_type(media_type) == "application/pdf"


def is_text_document(media_type: str) -> bool:
    """Whether a document is text: ``text/*``, JSON, XML, YAML, or a ``+json``/``+xml`` type."""
    base = _base_media_type(media_type)
    return (
        base.startswith("text/")
        or base in _TEXT_APPLICATION_TYPES
        or base.endswith(("+json", "+xml"))
    )


def document_text(media_type: str, data: bytes, where: str) -> str:
    """A text document's characters, decoded with its ``charset`` parameter (default UTF-8).

    Raises:
        InvalidValueError: the bytes do not decode with that charset, or the charset is
            unknown (rule ``adapter.document.text_encoding``, naming ``where``).
    """
    charset = "utf-8"
    for param in media_type.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"')
    try:
        return data.decode(charset)
    except (LookupError, UnicodeDecodeError):
        raise InvalidValueError(
            f"{where}.data: a {_base_media_type(media_type)} document that is not valid "
            f"{charset} text (rule adapter.document.text_encoding)"
        ) from None


def kernel_speaks(request: StreamCompletionRequest | None, minor: int) -> bool:
    """Whether the kernel that sent ``request`` speaks protocol ``1.<minor>`` or later, by its
    ``kernel_protocol_version`` (protocol 1.2; absent: a 1.0 or 1.1 kernel). A plugin sends a
    kernel nothing newer than its version: a vendor_block event and an empty text_delta that
    only carries vendor data go to a 1.2 kernel only."""
    if request is None:
        return False
    version = parse_protocol_version(request.kernel_protocol_version)
    return version is not None and version[0] == PROTOCOL_MAJOR and version[1] >= minor


def stored_json(
    data: bytes, path: str, rule: str, kind: type[dict[str, Any]] | type[list[Any]]
) -> Any:
    """A JSON value an adapter stored verbatim (vendor data, a vendor block) parsed back.

    Args:
        data: The stored UTF-8 JSON text.
        path: The field it came from, named in the error.
        rule: The rule id of the error.
        kind: ``dict`` (a JSON object) or ``list`` (an array).

    Raises:
        InvalidValueError: ``data`` is not the UTF-8 JSON text of a value of ``kind``.
    """
    try:
        parsed = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        parsed = None
    if not isinstance(parsed, kind):
        what = "an object" if kind is dict else "an array"
        raise InvalidValueError(
            f"{path}: not the JSON text of {what} (rule {rule})", path=path, rule=rule
        )
    return parsed
