"""Explicit cache breakpoints through Gemini's ``cachedContents`` (docs/adapters.md "Gemini",
"Caching").

A request whose model declares ``caching.explicit_markers`` and that carries
``cache_breakpoints`` is sent in two steps:

1. The prefix up to the furthest breakpoint (``after_assembled_context`` and ``after_tools``:
   the system instruction and tools; ``after_message_index = i``: also the contents of
   messages 0..i) is looked up by its content hash. The key is the SHA-256 of the provider's
   credential scope (a digest of the API key, or of the Vertex project, location and
   credentials, and the base URL: a cache is never shared across keys), the model and the
   serialized prefix. The system instruction, tools and tool config always move into the
   cache: Google refuses a request that uses a cache and sets any of them.
2. A missing or expired entry is created (``POST cachedContents`` with ``model``, the prefix
   and ``ttl``: the breakpoint's ``ttl_seconds``, else 3,600 s). The request then names it in
   ``cachedContent`` and sends only the contents after the prefix (at least the last content:
   a breakpoint after the last message caches all but it). The completion that created the
   entry reports its cost (:class:`~protocol_py.providers.gemini.usage.CacheCharge`).

An entry is used while more than :data:`EXPIRY_MARGIN_S` of its lifetime is left (lifetime
counted from before the create call was sent); then it is created again. A generate call
answered with an error about the cached content (deleted or evicted upstream) forgets the entry
and is sent once more with a new one. When a cache cannot be created the request goes out
uncached with a warning; a prefix Google refuses to cache (too small: HTTP 400) is not tried
again until its would-be lifetime has passed. Calls with the same prefix wait for one create.
At most :data:`MAX_ENTRIES` entries are remembered (least recently used dropped first; the
vendor deletes them when their TTL ends).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import betterproto2

from protocol_py.providers.gemini.usage import CacheCharge
from protocol_py.providers.http import events as ev
from protocol_py.providers.http import vendor_json
from protocol_py.providers.http.request import dump_body
from protocol_py_gen.model.v1 import ModelSpec, StreamCompletionRequest

__all__ = [
    "EXPIRY_MARGIN_S",
    "MAX_ENTRIES",
    "CachePlan",
    "ExplicitCaches",
    "plan_cache",
]

log = logging.getLogger("protocol_py.providers")

MAX_ENTRIES: Final = 256
"""Most cache entries (and refused prefixes) remembered per provider."""

EXPIRY_MARGIN_S: Final = 30.0
"""An entry with less lifetime left than this (seconds) is not used: it is created again."""

_CACHED_KEYS: Final = ("systemInstruction", "tools", "toolConfig")


@dataclass(frozen=True, slots=True)
class CachePlan:
    """How one request splits into a cached prefix and the rest.

    Attributes:
        prefix: The ``cachedContents`` members: system instruction, tools, tool config and the
            first contents.
        rest: The request body without those members (``contents`` holds the rest).
        ttl_seconds: The lifetime to create the entry with.
    """

    prefix: dict[str, Any]
    rest: dict[str, Any]
    ttl_seconds: int


def plan_cache(
    request: StreamCompletionRequest,
    spec: ModelSpec,
    body: Mapping[str, Any],
    kept: list[bool],
    default_ttl: int,
) -> CachePlan | None:
    """The split for the furthest breakpoint, or None (no breakpoint, the model declares no
    explicit markers, or nothing to cache).

    Args:
        request: The request (its ``cache_breakpoints``).
        spec: The model (``caching.explicit_markers``).
        body: The whole request body (:func:`~protocol_py.providers.gemini.request.
            build_gemini_body`).
        kept: For each message, whether it became a content of ``body``.
        default_ttl: The lifetime when the breakpoint names none, seconds.
    """
    if spec.caching is None or not spec.caching.explicit_markers:
        return None
    cut = -1
    ttl: int | None = None
    for bp in request.cache_breakpoints:
        name, value = betterproto2.which_one_of(bp, "position")
        if name in ("after_assembled_context", "after_tools"):
            here = 0
        elif name == "after_message_index" and isinstance(value, int):
            here = sum(1 for flag in kept[: value + 1] if flag)
        else:
            continue
        if here >= cut:
            cut, ttl = here, bp.ttl_seconds
    if cut < 0:
        return None
    contents = list(body.get("contents", []))
    cut = min(cut, max(0, len(contents) - 1))  # the request keeps at least its last content
    prefix: dict[str, Any] = {k: body[k] for k in _CACHED_KEYS if k in body}
    if cut:
        prefix["contents"] = contents[:cut]
    if not prefix:
        return None
    rest = {k: v for k, v in body.items() if k not in _CACHED_KEYS and k != "contents"}
    rest["contents"] = contents[cut:]
    return CachePlan(prefix=prefix, rest=rest, ttl_seconds=ttl or default_ttl)


@dataclass(slots=True)
class _Entry:
    name: str
    expires: float
    tokens: int


Creator = Callable[[dict[str, Any]], Awaitable[tuple[int, bytes]]]
"""Sends a ``cachedContents`` create body; answers the HTTP status and the response body."""


class ExplicitCaches:
    """The ``cachedContents`` entries one provider created, by prefix hash (module docstring).

    Args:
        clock: Seconds on a monotonic clock (tests pass their own).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._refused: OrderedDict[str, float] = OrderedDict()
        self._creating: dict[str, asyncio.Future[_Entry | None]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every entry (Configure changed the key, the project or the URL)."""
        self._entries.clear()
        self._refused.clear()

    @staticmethod
    def key(scope: str, model: str, prefix: Mapping[str, Any], ttl: int) -> str:
        """The entry key: SHA-256 of the credential scope, model, lifetime and prefix."""
        digest = hashlib.sha256()
        for piece in (scope.encode(), model.encode(), str(ttl).encode(), dump_body(prefix)):
            digest.update(len(piece).to_bytes(8, "big"))
            digest.update(piece)
        return digest.hexdigest()

    def forget(self, name: str) -> bool:
        """Drop the entry named ``name`` (the vendor no longer has it); True when one was."""
        for key, entry in list(self._entries.items()):
            if entry.name == name:
                del self._entries[key]
                return True
        return False

    async def use(
        self, key: str, model_resource: str, plan: CachePlan, create: Creator
    ) -> tuple[str, CacheCharge | None] | None:
        """The name of a live entry for ``key`` (created now when needed, then with its
        charge), or None when the request must go uncached."""
        now = self._clock()
        entry = self._entries.get(key)
        if entry is not None and entry.expires - now > EXPIRY_MARGIN_S:
            self._entries.move_to_end(key)
            return entry.name, None
        self._entries.pop(key, None)
        refused = self._refused.get(key)
        if refused is not None and refused > now:
            return None
        pending = self._creating.get(key)
        if pending is not None:
            shared = await asyncio.shield(pending)
            return (shared.name, None) if shared is not None else None
        future: asyncio.Future[_Entry | None] = asyncio.get_running_loop().create_future()
        self._creating[key] = future
        try:
            created = await self._create(key, model_resource, plan, create, now)
            future.set_result(created)
        except BaseException:
            future.set_result(None)
            raise
        finally:
            del self._creating[key]
        if created is None:
            return None
        return created.name, CacheCharge(tokens=created.tokens, ttl_seconds=plan.ttl_seconds)

    async def _create(
        self, key: str, model_resource: str, plan: CachePlan, create: Creator, started: float
    ) -> _Entry | None:
        body = {"model": model_resource, **plan.prefix, "ttl": f"{plan.ttl_seconds}s"}
        try:
            status, answer = await create(body)
        except Exception as exc:  # a network failure: this request goes uncached
            log.warning("cachedContents create failed (%s); sent uncached", type(exc).__name__)
            return None
        if status >= 300:
            if status == 400:
                self._remember(self._refused, key, started + plan.ttl_seconds)
            log.warning("cachedContents create answered HTTP %d; sent uncached", status)
            return None
        try:
            obj = vendor_json.loads(answer)
        except ValueError:
            obj = None
        name = ev.as_str(obj.get("name")) if isinstance(obj, dict) else None
        usage = obj.get("usageMetadata") if isinstance(obj, dict) else None
        tokens = (
            ev.usage_count(usage, "totalTokenCount", "cachedContents.usageMetadata")
            if isinstance(usage, dict)
            else None
        )
        if name is None:
            log.warning("cachedContents create answered without a name; sent uncached")
            return None
        entry = _Entry(name=name, expires=started + plan.ttl_seconds, tokens=tokens or 0)
        self._remember(self._entries, key, entry)
        return entry

    @staticmethod
    def _remember(table: OrderedDict[str, Any], key: str, value: Any) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > MAX_ENTRIES:
            table.popitem(last=False)
