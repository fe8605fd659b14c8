"""StreamCompletionRequest validation (spec: "StreamCompletionRequest", "GenerationParams",
"Canonical message & content-block schema", "Tool schema"; docs/decisions.md#d4,
docs/decisions.md#d5, docs/decisions.md#d13, docs/decisions.md#d16).

* :func:`validate_request`: a request against the resolved ModelSpec. Its result mixes errors
  and warnings; warnings (``severity="warning"``) never make a request invalid. Use
  :func:`~protocol_py.errors.errors_only` to keep the errors.
* :func:`validate_request_shape`: the request rules that need no ModelSpec (what a server still
  reports when ``model_id`` names no served model).

Each violation names a field path (``messages[2].content[0].tool_use.id``), a stable rule id
(``request.content.tool_use_id_duplicate``) and a message naming the offending value; every
broken rule is reported, up to :data:`MAX_VIOLATIONS`. Rule ids are part of the contract (the
conformance vectors in ``testdata/conformance/`` pin them). A request the server just decoded
cleanly is walked only where its messages' wire images were not validated before
(:mod:`protocol_py.rules.request_memo`); the result is the same.

Bad input types raise :class:`~protocol_py.errors.InvalidValueError`; unknown enum numbers are
``enum.unknown_value`` violations.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from operator import attrgetter
from typing import Any, Final, NamedTuple, cast

import betterproto2

from protocol_py.bounded_text import MAX_ECHOED_VALUE_CHARS, quote_value
from protocol_py.codec import metadata, wire
from protocol_py.codec.structs import from_struct, structs_within
from protocol_py.errors import InvalidValueError, Violation
from protocol_py.rules._checks import _enum_label, _join, _require, _struct_violation, _walk
from protocol_py.rules.constraints import request_violations as constraint_violations
from protocol_py.rules.json_schema import PORTABLE_SCHEMA_KEYWORDS, _schema_violations
from protocol_py.rules.request_memo import (
    PREFIXES,
    VALIDATED,
    CleanMessage,
    ValidState,
    clean_message,
    settings_of,
    take_request_images,
)
from protocol_py.rules.vendor_block import vendor_block_problems
from protocol_py.rules.vendor_data import vendor_data_problems
from protocol_py.rules.version_gate import kernel_version_violations
from protocol_py_gen.content.v1 import (
    ContentBlock,
    ContextSection,
    Message,
    Role,
)
from protocol_py_gen.google import protobuf as wkt
from protocol_py_gen.model.v1 import (
    CacheBreakpoint,
    CachingSpec,
    GenerationParams,
    ModelSpec,
    StreamCompletionRequest,
    ThinkingDisable,
    ThinkingSpec,
    ToolChoiceMode,
    ToolDeclaration,
)

__all__ = [
    "MAX_TOOL_SCHEMA_VALUES",
    "MAX_VIOLATIONS",
    "TOO_MANY_VIOLATIONS_RULE",
    "tool_schemas_exceed",
    "validate_request",
    "validate_request_shape",
    "violations_capped",
]


_TOOL_RESULT_KINDS = frozenset({"text", "image", "document"})

_message_id_of: Final = attrgetter("id")
"""A message's ``id``."""


class _BlockSupport(NamedTuple):
    """A content-block kind the model may not take: rule ``request.content.<kind>_unsupported``
    with message ``model '<id>' <message>`` when ``supported`` is false for the model."""

    supported: Callable[[ModelSpec, ThinkingSpec], bool]
    message: str
    severity: str = "error"


def _thinking_support(kind: str) -> _BlockSupport:
    return _BlockSupport(
        lambda _, thinking: thinking.supported,
        f"does not reason (thinking.supported=false); a {kind} block is not relevant to it and "
        "an adapter will not send it",
        "warning",
    )


_BLOCK_SUPPORT: Final[Mapping[str, _BlockSupport]] = {
    "image": _BlockSupport(
        lambda spec, _: spec.supports_vision,
        "does not accept image blocks (supports_vision=false)",
    ),
    "document": _BlockSupport(
        lambda spec, _: spec.supports_documents,
        "does not accept document blocks (supports_documents=false)",
    ),
    "thinking": _thinking_support("thinking"),
    "redacted_thinking": _thinking_support("redacted_thinking"),
    "tool_use": _BlockSupport(
        lambda spec, _: spec.supports_tool_use,
        "does not accept tool_use blocks (supports_tool_use=false)",
    ),
    "tool_result": _BlockSupport(
        lambda spec, _: spec.supports_tool_use,
        "does not accept tool_result blocks (supports_tool_use=false)",
    ),
}
"""The block kinds a model's capabilities can refuse, checked before the kind's own rules."""

_MEDIA_BLOCKS: Final[Mapping[str, str]] = {
    "image": "an image block",
    "document": "a document block",
}
"""Block kinds that MUST carry a media type (rule ``request.content.media_type_empty``), and how
their message names them."""


def _set_members(message: betterproto2.Message, group: str) -> list[str]:
    """The members of oneof ``group`` set on ``message``, in declaration order."""
    names = metadata.oneof_members(type(message), group)
    return [name for name in names if getattr(message, name, None) is not None]


MAX_VIOLATIONS: Final = 1000
"""Most violations (errors and warnings) one request validation collects, in violations: it
stops walking the request at the next one and appends a last violation of rule
:data:`TOO_MANY_VIOLATIONS_RULE` saying more were found (a request of 500,000 empty messages
would otherwise build 1.5 million violation objects)."""

TOO_MANY_VIOLATIONS_RULE: Final = "request.too_many_violations"
"""Rule of the last violation of a capped validation (see :data:`MAX_VIOLATIONS`)."""


MAX_TOOL_NAME_CHARS: Final = 64
"""Longest tool name, characters: the limit Anthropic, OpenAI and Gemini share (Anthropic
https://docs.anthropic.com/en/docs/build-with-claude/tool-use, OpenAI
https://platform.openai.com/docs/api-reference/chat/create, Gemini
https://ai.google.dev/api/caching#FunctionDeclaration and Vertex AI
https://cloud.google.com/vertex-ai/generative-ai/docs/reference/rest/v1/Tool)."""

MAX_TOOL_SCHEMA_VALUES: Final = 10_000
"""Most JSON values (object members and array elements at any depth, counted together) the
tool input schemas of one request may hold, in values. A schema's check against the JSON Schema
metaschema costs about 0.3 ms per value (jsonschema, draft 2020-12), so this bounds a request's
schema checks to about 3 s of the server's CPU worker; a request over it gets one
``request.tools.input_schema.too_large`` error and its schemas are not checked. 100 tools of
50 values each hold 5,000."""


def tool_schemas_exceed(tools: Sequence[ToolDeclaration], limit: int) -> bool:
    """Whether the input schemas of ``tools`` hold more than ``limit`` JSON values (object
    members and array elements at any depth): a walk that stops at the first value past it."""
    return not structs_within((tool.input_schema for tool in tools), limit)


_TOOL_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*", re.ASCII)
"""Names every vendor accepts: ``A-Z a-z 0-9 _ -``, starting with a letter or ``_`` (Vertex
AI's extra rule)."""


def valid_tool_name(name: str) -> bool:
    """Whether ``name`` is 1-:data:`MAX_TOOL_NAME_CHARS` characters of ``A-Z a-z 0-9 _ -``
    starting with a letter or ``_``.

    The length is checked first, so a name of any size costs O(1) before the (constant) pattern
    runs on at most 64 characters."""
    return 0 < len(name) <= MAX_TOOL_NAME_CHARS and _TOOL_NAME_RE.fullmatch(name) is not None


class _CappedError(Exception):
    """The request already broke :data:`MAX_VIOLATIONS` rules: stop walking it."""


class _Violations(list[Violation]):
    """A violation list that raises :class:`_CappedError` instead of growing past
    :data:`MAX_VIOLATIONS` items."""

    def append(self, item: Violation) -> None:
        if len(self) >= MAX_VIOLATIONS:
            raise _CappedError
        super().append(item)

    def extend(self, items: Any) -> None:
        for item in items:
            self.append(item)


def _capped_note() -> Violation:
    return Violation(
        "",
        TOO_MANY_VIOLATIONS_RULE,
        f"more than {MAX_VIOLATIONS} violations: validation stopped after the first "
        f"{MAX_VIOLATIONS} (bound MAX_VIOLATIONS)",
    )


def violations_capped(violations: Sequence[Violation]) -> bool:
    """True when ``violations`` ends with the note of a capped validation
    (:data:`MAX_VIOLATIONS`): the others are the first of more."""
    return bool(violations) and violations[-1].rule == TOO_MANY_VIOLATIONS_RULE


class _RequestChecker:
    """One pass over a request; collects violations in ``out``."""

    def __init__(self, spec: ModelSpec | None, out: list[Violation]) -> None:
        # Without a spec only the model-independent rules run (validate_request_shape).
        self.has_spec = spec is not None
        self.spec = spec if spec is not None else ModelSpec()
        self.thinking = self.spec.thinking if self.spec.thinking is not None else ThinkingSpec()
        self.caching = self.spec.caching if self.spec.caching is not None else CachingSpec()
        self.out = out
        self.tool_use_ids: dict[str, str] = {}
        self.new_tool_use_ids: list[str] = []

    def add(self, path: str, rule: str, message: str, severity: str = "error") -> None:
        self.out.append(
            Violation(path, rule, message, "warning" if severity == "warning" else "error")
        )

    # -- content blocks -------------------------------------------------------------------

    def block(self, block: ContentBlock, path: str, where: str, earlier_ids: set[str]) -> None:
        """Check one content block. ``where`` is "message", "tool_result" or "context"."""
        members = _set_members(block, "block")
        if not members:
            self.add(path, "request.content.block_unset", "no member of the block oneof is set")
            return
        if len(members) > 1:
            self.add(
                path,
                "request.content.block_multiple",
                f"exactly one member of the block oneof MUST be set, found {', '.join(members)}",
            )
            return
        kind = members[0]
        bpath = _join(path, kind)
        if where != "message" and kind not in _TOOL_RESULT_KINDS:
            if where == "tool_result":
                self.add(
                    bpath,
                    "request.content.tool_result_content_kind",
                    f"a tool_result may hold only text, image and document blocks, not {kind}",
                )
            else:
                self.add(
                    bpath,
                    "request.context.content_kind",
                    f"an assembled_context section may hold only text, image and document "
                    f"blocks, not {kind}",
                )
            return
        spec = self.spec
        support = _BLOCK_SUPPORT.get(kind)
        if support is not None and self.has_spec and not support.supported(spec, self.thinking):
            self.add(
                bpath,
                f"request.content.{kind}_unsupported",
                f"model {spec.id!r} {support.message}",
                support.severity,
            )
        if kind in _MEDIA_BLOCKS:
            media = block.image if kind == "image" else block.document
            if media is not None and media.media_type == "":
                self.add(
                    _join(bpath, "media_type"),
                    "request.content.media_type_empty",
                    f"{_MEDIA_BLOCKS[kind]} MUST carry its media type",
                )
        if kind == "text":
            text = block.text
            if text is not None and text.vendor_data:
                for problem in vendor_data_problems(text.vendor_data, item="text block"):
                    self.add(
                        f"{bpath}.vendor_data[{problem.entry}]",
                        f"request.content.text.vendor_data.{problem.rule}",
                        problem.message,
                    )
        elif kind == "vendor_block":
            if block.vendor_block is not None:
                for found in vendor_block_problems(block.vendor_block):
                    self.add(
                        f"{bpath}.{found.field}",
                        f"request.content.vendor_block.{found.rule}",
                        found.message,
                    )
        elif kind == "tool_use":
            tool_use = block.tool_use
            if tool_use is not None:
                if tool_use.id == "":
                    self.add(
                        _join(bpath, "id"),
                        "request.content.tool_use_id_empty",
                        "a tool_use block MUST carry the vendor's tool-call id",
                    )
                elif tool_use.id in self.tool_use_ids:
                    self.add(
                        _join(bpath, "id"),
                        "request.content.tool_use_id_duplicate",
                        f"tool_use id {tool_use.id!r} is already used at "
                        f"{self.tool_use_ids[tool_use.id]}",
                    )
                else:
                    self.tool_use_ids[tool_use.id] = bpath
                    self.new_tool_use_ids.append(tool_use.id)
                if tool_use.name == "":
                    self.add(
                        _join(bpath, "name"),
                        "request.content.tool_use_name_empty",
                        "a tool_use block MUST name the called tool",
                    )
                if tool_use.input is not None:
                    ipath = _join(bpath, "input")
                    try:
                        from_struct(tool_use.input, path=ipath)
                    except InvalidValueError as exc:
                        self.out.append(
                            _struct_violation(exc, ipath, "request.content.tool_use_input_invalid")
                        )
                for problem in vendor_data_problems(tool_use.vendor_data):
                    self.add(
                        f"{bpath}.vendor_data[{problem.entry}]",
                        f"request.content.tool_use.vendor_data.{problem.rule}",
                        problem.message,
                    )
        elif kind == "tool_result":
            result = block.tool_result
            if result is not None:
                if result.tool_use_id not in earlier_ids:
                    self.add(
                        _join(bpath, "tool_use_id"),
                        "request.content.tool_result_unknown_id",
                        f"tool_result answers tool_use id {result.tool_use_id!r}, which no "
                        "tool_use block of an earlier message carries",
                    )
                for j, inner in enumerate(result.content):
                    self.block(inner, f"{bpath}.content[{j}]", "tool_result", earlier_ids)

    def _role_fits(self, role: Role, block: ContentBlock, path: str) -> None:
        """tool_use is the model's (ROLE_ASSISTANT); tool_result answers it from the user's side
        (ROLE_USER, which carries tool results: content.v1 Role)."""
        if role == Role.USER and block.tool_use is not None:
            self.add(
                _join(path, "tool_use"),
                "request.content.tool_use_in_user_message",
                "a tool_use block is a call made by the model: it belongs in a ROLE_ASSISTANT "
                "message, not a ROLE_USER one",
            )
        elif role == Role.USER and block.vendor_block is not None:
            self.add(
                _join(path, "vendor_block"),
                "request.content.vendor_block_in_user_message",
                "a vendor_block is content a vendor produced: it belongs in a ROLE_ASSISTANT "
                "message, not a ROLE_USER one",
            )
        elif role == Role.ASSISTANT and block.tool_result is not None:
            self.add(
                _join(path, "tool_result"),
                "request.content.tool_result_in_assistant_message",
                "a tool_result block answers the model's call: it belongs in a ROLE_USER "
                "message, not a ROLE_ASSISTANT one",
            )

    def messages(
        self, messages: Sequence[Message], images: Sequence[bytes | None] | None = None
    ) -> None:
        """Check the messages; ``images``: each message's wire image, for a request just
        decoded cleanly from them, so a message validated before is not walked again
        (:mod:`protocol_py.rules.request_memo`); a None image (a message over
        :data:`~protocol_py.rules.request_memo.MAX_IMAGE_BYTES`) is walked uncached, and a list
        holding one is not kept as a conversation prefix."""
        if not messages:
            self.add("messages", "request.messages.empty", "messages MUST be non-empty")
        earlier_ids: set[str] = set()
        message_ids: dict[str, int] = {}
        settings = settings_of(self.spec if self.has_spec else None)
        start = 0
        kept: tuple[bytes, ...] = ()
        first = len(self.out)
        # the content keys the server's decode memo computed (the same bytes objects, their
        # hash computed once), so the memo below scans and copies no image of its own
        keys = images.content_keys if isinstance(images, wire.MessageImages) else None
        if keys is not None and images is not None and len(keys) != len(images):
            keys = None
        # with the content keys, a conversation's last valid list is found by its content,
        # under new message ids too (whose checks run below); else by its images and first id
        prefix_key: Hashable | None = None
        listed: Sequence[bytes | None] | None = None
        if keys is not None and messages:
            prefix_key, listed = (settings, "content", keys[0]), keys
        elif images is not None and messages:
            prefix_key, listed = (settings, messages[0].id), images
        if prefix_key is not None and listed is not None:
            found = PREFIXES.match(prefix_key, listed)
            if found is not None:  # the same messages as a valid list seen before
                kept, state = found
                start = len(kept)
                if keys is not None:  # the ids may be new: checked as a full walk would
                    message_ids = self._resumed_ids(messages, start)
                else:
                    message_ids = dict(state.message_ids)
                self.tool_use_ids.update(state.tool_use_ids)
                earlier_ids = set(state.answered)
        uncached = False  # a message without its image: the list is not kept as a prefix
        # with the keys, the messages after the prefix are looked up at once (one lock)
        known_all = VALIDATED.get_many(settings, keys[start:]) if keys is not None else None
        for i in range(start, len(messages)):
            message = messages[i]
            mpath = f"messages[{i}]"
            self._message_id(message, i, message_ids)
            image = images[i] if images is not None else None
            if image is None:
                uncached = True
            else:
                known = (
                    known_all[i - start]
                    if known_all is not None
                    else VALIDATED.get(settings, image)
                )
                if known is not None and self._reuse(known, mpath, earlier_ids):
                    continue
            before = len(self.out)
            if message.role == Role.UNSPECIFIED:
                self.add(
                    _join(mpath, "role"),
                    "request.message.role_unspecified",
                    "a message MUST NOT carry ROLE_UNSPECIFIED",
                )
            if not message.content:
                self.add(
                    _join(mpath, "content"),
                    "request.message.content_empty",
                    "a message MUST carry at least one content block",
                )
            for j, block in enumerate(message.content):
                bpath = f"{mpath}.content[{j}]"
                self._role_fits(message.role, block, bpath)
                self.block(block, bpath, "message", earlier_ids)
            if image is not None and len(self.out) == before:
                key = keys[i] if keys is not None else None
                VALIDATED.put(settings, image, clean_message(message), key)
            earlier_ids.update(self.new_tool_use_ids)
            self.new_tool_use_ids.clear()
        if (
            prefix_key is not None
            and listed is not None
            and len(self.out) == first
            and start < len(messages)
            and not uncached
        ):
            PREFIXES.put(
                prefix_key,
                # the images (or keys) kept already are reused; none is None (not uncached)
                cast("tuple[bytes, ...]", (*kept, *listed[start:])),
                ValidState(
                    message_ids=dict(message_ids),
                    tool_use_ids=dict(self.tool_use_ids),
                    answered=frozenset(earlier_ids),
                ),
            )

    def _resumed_ids(self, messages: Sequence[Message], count: int) -> dict[str, int]:
        """The id rules of ``messages[:count]`` (a resumed list), as :meth:`_message_id` on
        each: id -> index. When every id is present and unique (a resent conversation), the
        map is built at once; otherwise message by message, for the violations."""
        ids = dict(zip(map(_message_id_of, messages[:count]), range(count), strict=True))
        if len(ids) == count and "" not in ids:
            return ids
        message_ids: dict[str, int] = {}
        for i in range(count):
            self._message_id(messages[i], i, message_ids)
        return message_ids

    def _message_id(self, message: Message, i: int, message_ids: dict[str, int]) -> None:
        """The id rules of ``messages[i]`` (present; unique), recording it in ``message_ids``
        (id -> index)."""
        if message.id == "":
            self.add(
                f"messages[{i}].id",
                "request.message.id_missing",
                "every message MUST carry its kernel-assigned id",
            )
        elif message.id in message_ids:
            self.add(
                f"messages[{i}].id",
                "request.message.id_duplicate",
                f"message id {message.id!r} is already used by "
                f"messages[{message_ids[message.id]}] (ids are unique per message)",
            )
        else:
            message_ids[message.id] = i

    def _reuse(self, known: CleanMessage, mpath: str, earlier_ids: set[str]) -> bool:
        """Account for a message that passed every message-local rule before (``known``):
        True when its tool_use ids are new and its tool_results answer earlier calls, as a
        full walk would find; False (nothing changed) when the message must be walked."""
        uses, seen = known.uses, self.tool_use_ids
        for _, use in uses:
            if use in seen:
                return False
        for answer in known.answers:
            if answer not in earlier_ids:
                return False
        for j, use in uses:
            seen[use] = f"{mpath}.content[{j}].tool_use"
            earlier_ids.add(use)
        return True

    def context(self, sections: Sequence[ContextSection]) -> None:
        for i, section in enumerate(sections):
            spath = f"assembled_context[{i}]"
            if section.provider == "":
                self.add(
                    _join(spath, "provider"),
                    "request.context.provider_empty",
                    "a context section MUST name the provider that contributed it",
                )
            for j, block in enumerate(section.content):
                self.block(block, f"{spath}.content[{j}]", "context", set())

    # -- tools ----------------------------------------------------------------------------

    def tools(self, tools: Sequence[ToolDeclaration]) -> None:
        if tools and self.has_spec and not self.spec.supports_tool_use:
            self.add(
                "tools",
                "request.tools.unsupported",
                f"model {self.spec.id!r} does not accept tool declarations "
                f"(supports_tool_use=false), got {len(tools)}",
            )
        first: dict[str, int] = {}
        schemas = not tool_schemas_exceed(tools, MAX_TOOL_SCHEMA_VALUES)
        if not schemas:
            self.add(
                "tools",
                "request.tools.input_schema.too_large",
                f"the tools' input schemas hold more than {MAX_TOOL_SCHEMA_VALUES} JSON values "
                "(object members and array elements at any depth, counted together; bound "
                "MAX_TOOL_SCHEMA_VALUES); they were not checked",
            )
        for i, tool in enumerate(tools):
            tpath = f"tools[{i}]"
            if tool.name == "":
                self.add(_join(tpath, "name"), "request.tools.name_empty", "a tool MUST be named")
            elif not valid_tool_name(tool.name):
                self.add(
                    _join(tpath, "name"),
                    "request.tools.name_invalid",
                    f"tool name {quote_value(tool.name)}"
                    + (
                        f" ({len(tool.name)} characters)"
                        if len(tool.name) <= MAX_ECHOED_VALUE_CHARS  # else quote_value says it
                        else ""
                    )
                    + " must be "
                    f"1-{MAX_TOOL_NAME_CHARS} characters of A-Z, a-z, 0-9, '_' or '-', "
                    "starting with a letter or '_'",
                )
            elif tool.name in first:
                self.add(
                    _join(tpath, "name"),
                    "request.tools.name_duplicate",
                    f"tool name {tool.name!r} is already declared by tools[{first[tool.name]}]",
                )
            else:
                first[tool.name] = i
            if tool.input_schema is not None and schemas:
                self.schema(tool.input_schema, _join(tpath, "input_schema"))

    def schema(self, struct: wkt.Struct, path: str) -> None:
        try:
            schema = from_struct(struct, path=path)
        except InvalidValueError as exc:
            self.out.append(_struct_violation(exc, path, "request.tools.input_schema.invalid"))
            return
        self.out.extend(_schema_violations(schema, path, "request.tools.input_schema.invalid"))
        top_type = schema.get("type")
        if isinstance(top_type, str) and top_type != "object":
            self.add(
                _join(path, "type"),
                "request.tools.input_schema.not_object",
                f"a tool's arguments are a JSON object, but the schema's type is {top_type!r}",
                "warning",
            )
        self._portable(schema, path)

    def _portable(self, schema: Mapping[str, Any], path: str) -> None:
        stack: list[tuple[str, Mapping[str, Any]]] = [(path, schema)]
        while stack:
            where, node = stack.pop()
            for key in sorted(node):
                value = node[key]
                if key not in PORTABLE_SCHEMA_KEYWORDS:
                    self.add(
                        _join(where, key),
                        "request.tools.input_schema.non_portable",
                        f"JSON Schema keyword {key!r} is outside the portable subset (type, "
                        "properties, required, enum, items, description); adapters may ignore "
                        "or reject it",
                        "warning",
                    )
                elif key == "properties" and isinstance(value, Mapping):
                    for name in sorted(value, reverse=True):
                        if isinstance(value[name], Mapping):
                            stack.append((f"{where}.properties.{name}", value[name]))
                elif key == "items" and isinstance(value, Mapping):
                    stack.append((f"{where}.items", value))

    # -- generation parameters ------------------------------------------------------------

    def params(self, params: GenerationParams, tools: Sequence[ToolDeclaration]) -> None:
        thinking = self.thinking
        spec = self.spec
        effort = thinking.effort
        levels = list(effort.levels) if effort is not None else []
        if params.temperature is not None:
            value = float(params.temperature)
            if not math.isfinite(value):
                self.add(
                    "params.temperature",
                    "request.params.temperature.not_finite",
                    f"temperature {value} MUST be a finite number",
                )
            elif value < 0:
                self.add(
                    "params.temperature",
                    "request.params.temperature.negative",
                    f"temperature {value} MUST be >= 0 (its upper bound is the vendor's)",
                )
        if params.thinking_effort is not None and self.has_spec:
            where = "params.thinking_effort"
            if effort is None:
                self.add(
                    where,
                    "request.params.thinking_effort.unsupported",
                    f"model {spec.id!r} declares no effort control, so thinking_effort "
                    f"{params.thinking_effort!r} cannot be sent",
                )
            elif params.thinking_effort not in levels:
                self.add(
                    where,
                    "request.params.thinking_effort.unknown_level",
                    f"thinking_effort {params.thinking_effort!r} is not one of the model's "
                    f"levels {levels!r}",
                )
        if params.thinking_budget_tokens is not None and self.has_spec:
            where = "params.thinking_budget_tokens"
            budget = thinking.budget
            value = params.thinking_budget_tokens
            if budget is None:
                self.add(
                    where,
                    "request.params.thinking_budget_tokens.unsupported",
                    f"model {spec.id!r} declares no budget control, so thinking_budget_tokens "
                    f"{value} cannot be sent",
                )
            elif budget.range is not None and not budget.range.min <= value <= budget.range.max:
                self.add(
                    where,
                    "request.params.thinking_budget_tokens.out_of_range",
                    f"thinking_budget_tokens {value} is outside the model's range "
                    f"[{budget.range.min}, {budget.range.max}]",
                )
        if params.disable_thinking and params.thinking_budget_tokens is not None:
            # a budget sizes reasoning that disable_thinking turns off: contradictory. An effort
            # is allowed (CONDITIONAL models accept disabling only at some efforts).
            self.add(
                "params.disable_thinking",
                "request.params.disable_thinking.with_budget",
                f"disable_thinking=true contradicts thinking_budget_tokens "
                f"{params.thinking_budget_tokens}: send one or the other",
            )
        if params.disable_thinking and self.has_spec:
            self.disable(params)
        if params.max_output_tokens is not None:
            value = params.max_output_tokens
            if value <= 0:
                self.add(
                    "params.max_output_tokens",
                    "request.params.max_output_tokens.not_positive",
                    f"max_output_tokens {value} MUST be > 0",
                )
            elif self.has_spec and value > spec.max_output_tokens:
                self.add(
                    "params.max_output_tokens",
                    "request.params.max_output_tokens.above_model_max",
                    f"max_output_tokens {value} is above the model's maximum "
                    f"{spec.max_output_tokens}",
                )
        for i, seq in enumerate(params.stop_sequences):
            if seq == "":
                self.add(
                    f"params.stop_sequences[{i}]",
                    "request.params.stop_sequences.empty",
                    "a stop sequence MUST be non-empty",
                )
        if params.tool_choice is not None:
            self.tool_choice(params, tools)

    def disable(self, params: GenerationParams) -> None:
        thinking = self.thinking
        mode = thinking.disable
        where = "params.disable_thinking"
        if mode == ThinkingDisable.ALWAYS:
            return
        if mode == ThinkingDisable.CONDITIONAL:
            if params.thinking_effort is not None:
                effort: str | None = params.thinking_effort
                source = "requested"
            else:
                effort = thinking.effort.default if thinking.effort is not None else None
                source = "default"
            allowed = list(thinking.disable_allowed_efforts)
            if effort is None or effort not in allowed:
                self.add(
                    where,
                    "request.params.disable_thinking.effort_not_allowed",
                    f"model {self.spec.id!r} accepts disable_thinking only at efforts "
                    f"{allowed!r}; the {source} effort is {effort!r}",
                )
            return
        self.add(
            where,
            "request.params.disable_thinking.unsupported",
            f"model {self.spec.id!r} cannot turn reasoning off (thinking.disable is "
            f"{_enum_label(mode, ThinkingDisable)})",
        )

    def tool_choice(self, params: GenerationParams, tools: Sequence[ToolDeclaration]) -> None:
        choice = params.tool_choice
        assert choice is not None
        spec = self.spec
        mode = choice.mode
        label = _enum_label(mode, ToolChoiceMode)
        if mode == ToolChoiceMode.UNSPECIFIED:
            self.add(
                "params.tool_choice.mode",
                "request.params.tool_choice.mode_unspecified",
                "tool_choice.mode MUST be set",
            )
        elif self.has_spec and int(mode) not in {int(m) for m in spec.supported_tool_choice_modes}:
            supported = [_enum_label(m, ToolChoiceMode) for m in spec.supported_tool_choice_modes]
            self.add(
                "params.tool_choice.mode",
                "request.params.tool_choice.mode_unsupported",
                f"model {spec.id!r} does not accept tool_choice mode {label} "
                f"(supported: {supported!r})",
            )
        if mode == ToolChoiceMode.SPECIFIC:
            if choice.tool_name is None:
                self.add(
                    "params.tool_choice.tool_name",
                    "request.params.tool_choice.tool_name_missing",
                    "tool_choice mode TOOL_CHOICE_MODE_SPECIFIC needs tool_name",
                )
            elif choice.tool_name not in {t.name for t in tools}:
                self.add(
                    "params.tool_choice.tool_name",
                    "request.params.tool_choice.unknown_tool",
                    f"tool_choice.tool_name {quote_value(choice.tool_name)} names no tool in the "
                    "request's tools",
                )
        elif choice.tool_name is not None:
            self.add(
                "params.tool_choice.tool_name",
                "request.params.tool_choice.tool_name_unexpected",
                f"tool_name {quote_value(choice.tool_name)} is only allowed with "
                f"TOOL_CHOICE_MODE_SPECIFIC (mode is {label})",
            )

    # -- cache breakpoints ----------------------------------------------------------------

    def breakpoints(self, breakpoints: Sequence[CacheBreakpoint], n_messages: int) -> None:
        if not self.has_spec or not self.caching.explicit_markers:
            return  # meaningful only with explicit markers; ignored otherwise (spec)
        for i, bp in enumerate(breakpoints):
            bpath = f"cache_breakpoints[{i}]"
            members = _set_members(bp, "position")
            if not members:
                self.add(
                    bpath,
                    "request.cache_breakpoints.position_unset",
                    "no member of the position oneof is set",
                )
            elif len(members) > 1:
                self.add(
                    bpath,
                    "request.cache_breakpoints.position_multiple",
                    f"exactly one position MUST be set, found {', '.join(members)}",
                )
            elif members[0] == "after_message_index":
                index = bp.after_message_index
                assert index is not None
                if not 0 <= index < n_messages:
                    self.add(
                        _join(bpath, "after_message_index"),
                        "request.cache_breakpoints.index_out_of_range",
                        f"after_message_index {index} is outside [0, {n_messages})",
                    )


def _validate_request(
    request: StreamCompletionRequest, spec: ModelSpec | None, *, check_model_id: bool
) -> list[Violation]:
    """One pass over the request. ``spec`` None runs only the model-independent rules."""
    _require(request, StreamCompletionRequest, "request")
    out = _Violations()
    try:
        _check_request(request, spec, out, check_model_id=check_model_id)
    except _CappedError:
        return [*out, _capped_note()]
    return list(out)


def _check_request(
    request: StreamCompletionRequest,
    spec: ModelSpec | None,
    out: list[Violation],
    *,
    check_model_id: bool,
) -> list[Violation]:
    """The pass of :func:`_validate_request`, collecting into ``out``."""
    images = take_request_images(request)
    try:
        if not wire.take_wire_clean(request):  # a request fresh and clean from the wire is
            request = _walk(request, "", out)  # well-typed by construction
            images = None  # only a clean request's messages are those of their images
    except InvalidValueError as exc:
        if exc.rule != "value.too_deep":
            raise
        # reachable from the wire (betterproto2 decodes any depth): a violation, not an error
        out.clear()
        out.append(Violation(exc.path, "request.too_deep", str(exc)))
        return out
    if spec is not None:
        _require(spec, ModelSpec, "spec")
        # type check only; spec rules are validate_model_spec's job
        spec = _walk(spec, "spec", [])
    if check_model_id:
        if request.model_id == "":
            out.append(Violation("model_id", "request.model_id.empty", "model_id MUST be set"))
        elif spec is not None and request.model_id != spec.id:
            out.append(
                Violation(
                    "model_id",
                    "request.model_id.mismatch",
                    f"model_id {request.model_id!r} does not name the resolved model {spec.id!r}",
                )
            )
    checker = _RequestChecker(spec, out)
    checker.messages(request.messages, images)
    checker.tools(request.tools)
    if request.params is not None:
        checker.params(request.params, request.tools)
    checker.context(request.assembled_context)
    cc = request.call_context
    if cc is None:
        out.append(
            Violation(
                "call_context",
                "request.call_context.missing",
                "call_context MUST be set on every request",
            )
        )
    else:
        for name in ("session_id", "turn_id"):
            if getattr(cc, name) == "":
                out.append(
                    Violation(
                        f"call_context.{name}",
                        f"request.call_context.{name}_empty",
                        f"call_context.{name} MUST be non-empty",
                    )
                )
    checker.breakpoints(request.cache_breakpoints, len(request.messages))
    out.extend(kernel_version_violations(request.kernel_protocol_version))
    if spec is not None:
        out.extend(constraint_violations(request, spec))
    if request.provider_options is not None:
        # pass-through, never interpreted; but it still travels as JSON to the vendor
        try:
            from_struct(request.provider_options, path="provider_options")
        except InvalidValueError as exc:
            out.append(
                _struct_violation(exc, "provider_options", "request.provider_options_invalid")
            )
    return out


def validate_request(request: StreamCompletionRequest, spec: ModelSpec) -> list[Violation]:
    """Validate a StreamCompletionRequest against the resolved ModelSpec.

    Covers model_id, messages (non-empty, unique non-empty ids, roles, at least one content block),
    content blocks (exactly one member; tool_use only in ROLE_ASSISTANT and tool_result only in
    ROLE_USER messages; image/document/tool blocks against supports_vision/supports_documents/
    supports_tool_use, including blocks nested in tool_result and assembled_context; tool_result
    answering an earlier tool_use id; tool_use inputs that are JSON), tools (names, portable input
    schemas that are JSON), GenerationParams (temperature finite and >= 0, thinking
    effort/budget/disable per docs/decisions.md#d4, disable_thinking never with a budget,
    max_output_tokens in (0, model max], stop sequences, tool_choice), call_context, cache
    breakpoints (checked only when the model declares ``caching.explicit_markers``; ignored
    otherwise, as the spec requires), ``provider_options`` (never interpreted, but it must be
    JSON: no NaN or Infinity) and, protocol 1.2, vendor blocks
    (:mod:`protocol_py.rules.vendor_block`; only in ROLE_ASSISTANT messages), text vendor data,
    ``kernel_protocol_version`` and the model's declared constraints
    (:mod:`protocol_py.rules.constraints`). Every ``google.protobuf.Struct`` handed on to a
    provider is checked with :func:`protocol_py.codec.structs.from_struct`, so a request that
    passes never makes a provider fail on it. The rules that need no ModelSpec are
    :func:`validate_request_shape`, computed by the same pass. ``None`` in a field without proto3
    presence reads as its default. The spec itself is not validated here; use
    :func:`~protocol_py.rules.capabilities.validate_model_spec`. For a request the server just
    decoded cleanly, messages whose exact wire images were validated before are not walked again
    (:mod:`protocol_py.rules.request_memo`); the result is the same.

    Returns:
        Errors and warnings together, in request order. Warnings (``severity == "warning"``):
        tool-schema keywords outside the portable subset, a non-object tool schema, and
        thinking/redacted_thinking blocks sent to a model without reasoning. A request is valid
        iff ``errors_only(result)`` is empty.

    Raises:
        InvalidValueError: ``request`` or ``spec`` has the wrong type, or a field holds a value of
            the wrong Python type (rule ``value.wrong_type``).
    """
    if spec is None:  # validate_request_shape is the call for "no model"; keep the typed error
        _require(spec, ModelSpec, "spec")
    return _validate_request(request, spec, check_model_id=True)


def validate_request_shape(request: StreamCompletionRequest) -> list[Violation]:
    """Validate the parts of a StreamCompletionRequest that do not depend on the model.

    For a request whose ``model_id`` names no served model: a server reports these together with its
    own ``request.model_id.unknown`` instead of stopping at the unknown id. The rules are exactly
    those of :func:`validate_request` that need no ModelSpec, computed by the same pass:
    ``model_id`` non-empty, messages non-empty with unique non-empty ids, a role and some content,
    tool_use/tool_result blocks in the role they belong to, disable_thinking without a thinking
    budget, each content block with exactly one member (and the kinds allowed inside tool_result and
    assembled_context), media types, tool_use ids/names and inputs that are JSON, tool_result
    answering an earlier tool_use id, tool names and input schemas, temperature finite and >= 0,
    ``provider_options`` that is JSON, ``max_output_tokens`` > 0, non-empty stop sequences,
    tool_choice mode set and tool_name consistent with it, context section providers, call_context,
    and messages nested at most 100 deep (``request.too_deep``, then the only violation). Left out
    (they need the model): image/document/tool/thinking support, thinking effort, budget and
    disable, the model's output maximum and tool_choice modes, and cache breakpoints (meaningful
    only with explicit markers).

    Returns:
        Errors and warnings, in request order; a subset of what :func:`validate_request` returns
        for the same request against any ModelSpec (``request.model_id.mismatch`` aside).

    Raises:
        InvalidValueError: ``request`` is not a StreamCompletionRequest, or a field holds a value
            of the wrong Python type (rule ``value.wrong_type``).
    """
    return _validate_request(request, None, check_model_id=True)
