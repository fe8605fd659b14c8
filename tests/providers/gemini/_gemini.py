"""Helpers of the Gemini adapter tests: SSE bodies, the translator run over a body, the shared
recordings, an event comparison that covers every field the recordings state, and a stub of
the Gemini API (streamGenerateContent, cachedContents, countTokens, an OAuth token endpoint)."""

from __future__ import annotations

import json
import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import betterproto2

from protocol_py.providers.gemini.errors import gemini_error_from_http
from protocol_py.providers.gemini.parts import CALL_ID_PREFIX
from protocol_py.providers.gemini.stream import GeminiStreamTranslator
from protocol_py.providers.gemini.usage import CacheCharge
from protocol_py.providers.http.call_ids import CallIds
from protocol_py.providers.http.sse import SSEParser
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import StreamCompletionRequest, StreamEvent

from ...support.stub_upstream import Reply, Seen, StubUpstream

REPO = Path(__file__).resolve().parents[3]
RECORDED = (
    Path(
        os.environ.get("PROTOCOL_PY_SHARED_RECORDED")
        or REPO.parent / "shared" / "fixtures" / "vendor" / "recorded"
    )
    / "gemini"
)
"""The third-party Gemini recordings (``PROTOCOL_PY_SHARED_RECORDED`` overrides the root)."""
RECORDED_ABSENT = (
    "../shared/fixtures/vendor/recorded/gemini is absent: third-party recordings are not in this "
    "checkout"
)
SYNTHETIC_ID = re.compile(r"gemini_[0-9A-HJKMNP-TV-Z]{26}")
"""A synthetic tool-call id: ``gemini_`` and a ULID."""


def sse(*objects: Any) -> bytes:
    """Gemini's framing: one ``data:`` line per object, each event ended by CR LF CR LF."""
    return b"".join(
        b"data: " + json.dumps(o, separators=(",", ":")).encode() + b"\r\n\r\n" for o in objects
    )


def translate(
    body: bytes,
    *,
    chunk: int | None = None,
    text_vendor_data: bool = True,
    stop_sequences: tuple[str, ...] = (),
    used_ids: tuple[str, ...] = (),
    cache: CacheCharge | None = None,
) -> list[StreamEvent]:
    """Run a 200 body through the translator (and the parser with other lines), in one piece
    or in ``chunk``-byte pieces, to the end of the body."""
    translator = GeminiStreamTranslator(
        call_ids=CallIds(used_ids, prefix=CALL_ID_PREFIX),
        text_vendor_data=text_vendor_data,
        stop_sequences=stop_sequences,
        cache=cache,
    )
    parser = SSEParser(other_lines=True)
    out: list[StreamEvent] = []
    step = chunk or max(1, len(body))
    for i in range(0, len(body), step):
        for event in parser.feed(body[i : i + step]):
            out.extend(translator.on_event(event))
        if translator.finished:
            return out
    for event in parser.close():
        out.extend(translator.on_event(event))
    return out + translator.on_eof()


def response_object(
    parts: list[dict[str, Any]],
    finish: str | None = None,
    *,
    usage: dict[str, Any],
    response_id: str = "resp-1",
    **extra: Any,
) -> dict[str, Any]:
    """One ``GenerateContentResponse``: ``candidates[0]`` with ``parts`` (and ``finish`` as its
    finishReason), ``usage`` as usageMetadata, the response id, and any ``extra`` members."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "usageMetadata": usage, "responseId": response_id, **extra}


async def answer_text(provider: Any, model: str = "gemini-2.5-flash") -> str:
    """Stream one completion through ``provider`` (then close it): the answer's text."""
    try:
        events = [e async for e in provider.stream(completion(model), CallContext())]
    finally:
        await provider.aclose()
    return "".join(e.text_delta.text for e in events if e.text_delta is not None)


def kinds(events: list[StreamEvent]) -> list[str]:
    return [betterproto2.which_one_of(e, "event")[0] for e in events]


# --- the recordings ----------------------------------------------------------------------


def recording_paths() -> list[Path]:
    """The case files of the recordings folder (not their ``.body.json`` bodies)."""
    if not RECORDED.is_dir():
        return []
    return sorted(p for p in RECORDED.glob("*.json") if not p.name.endswith(".body.json"))


def load_recording(path: Path) -> tuple[dict[str, Any], bytes]:
    """A recording's case JSON and its HTTP body; a ``.body.json`` (one response object) is
    framed as the single SSE event it would be on the streaming endpoint."""
    meta: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    body = (path.parent / meta["body_file"]).read_bytes()
    if meta["http"]["status"] == 200 and meta["body_file"].endswith(".body.json"):
        body = sse(json.loads(body))
    return meta, body


def run_recording(meta: dict[str, Any], body: bytes, **settings: Any) -> list[StreamEvent]:
    status = meta["http"]["status"]
    if status >= 300:
        return [StreamEvent(error=gemini_error_from_http(status, body, meta["http"]["headers"]))]
    return translate(body, **settings)


# --- comparison ----------------------------------------------------------------------------


def _vendor_data(value: Any) -> list[tuple[str, bytes]]:
    return [(v.location, v.value) for v in value.vendor_data]


def _expected_vendor_data(exp: dict[str, Any]) -> list[tuple[str, bytes]]:
    return [(v["location"], v["value"].encode()) for v in exp.get("vendor_data", [])]


def assert_events(actual: list[StreamEvent], expected: list[dict[str, Any]]) -> dict[str, str]:
    """Event-by-event equality on every field the expected list states (fixtures README form:
    bytes fields as the vendor's string). A ``gemini_synth_...`` id of the proposals matches a
    synthetic id of ours, the same one for the whole call. Returns that id mapping."""
    assert kinds(actual) == [next(iter(e)) for e in expected]
    ids: dict[str, str] = {}

    def same_id(got: str, want: str, where: str) -> None:
        if want.startswith("gemini_synth_") or SYNTHETIC_ID.fullmatch(want):
            bound = ids.setdefault(want, got)
            assert SYNTHETIC_ID.fullmatch(got), where
            assert got == bound, where
        else:
            assert got == want, where

    for i, (event, exp_obj) in enumerate(zip(actual, expected, strict=True)):
        case, value = betterproto2.which_one_of(event, "event")
        exp = exp_obj[case]
        where = f"event {i} ({case})"
        if case == "text_delta":
            assert value.text == exp["text"], where
            assert _vendor_data(value) == _expected_vendor_data(exp), where
            assert value.new_block == exp.get("new_block", False), where
        elif case == "thinking_delta":
            assert value.text == exp["text"], where
        elif case == "thinking_signature":
            assert value.signature == exp["signature"].encode("utf-8"), where
        elif case == "tool_call_start":
            same_id(value.id, exp["id"], where)
            assert value.name == exp["name"], where
            assert _vendor_data(value) == _expected_vendor_data(exp), where
        elif case == "tool_call_delta":
            same_id(value.id, exp["id"], where)
            assert value.arguments_fragment == exp["arguments_fragment"], where
        elif case == "tool_call_done":
            same_id(value.id, exp["id"], where)
            assert _vendor_data(value) == _expected_vendor_data(exp), where
        elif case == "stream_start":
            assert value.provider_request_id == exp["provider_request_id"], where
        elif case == "metadata":
            for key in ("actual_model", "system_fingerprint", "service_tier"):
                assert getattr(value, key) == exp.get(key), f"{where}.{key}"
            assert dict(value.attrs) == exp.get("attrs", {}), where
        elif case == "usage":
            for key in ("input_tokens", "output_tokens"):
                assert getattr(value, key) == exp[key], f"{where}.{key}"
            for key in (
                "cache_read_tokens",
                "cache_write_tokens",
                "reasoning_tokens",
                "reasoning_already_counted",
                "vendor_total_tokens",
                "cache_storage_token_seconds",
            ):
                assert getattr(value, key) == exp.get(key), f"{where}.{key}"
            components = [(c.name, c.value) for c in value.components]
            assert components == [(c["name"], c["value"]) for c in exp.get("components", [])]
            assert list(value.rate_limits) == [], where
        elif case == "safety_notice":
            assert value.kind.name == exp["kind"], where
            assert value.message == exp.get("message"), where
            assert dict(value.attrs) == exp.get("attrs", {}), where
        elif case == "stop":
            assert value.reason.name.lower() == exp["reason"].lower(), where
            assert value.matched_stop_sequence == exp.get("matched_stop_sequence"), where
            assert value.model_affirmed == exp.get("model_affirmed"), where
            assert value.vendor_reason == exp.get("vendor_reason"), where
        elif case == "error":
            assert value.kind.name.lower() == exp["kind"].lower(), where
            for key in ("message", "retryable", "http_status", "vendor_code"):
                if key in exp:
                    assert getattr(value, key) == exp[key], f"{where}.{key}"
            if "retry_after" in exp:
                seconds = float(exp["retry_after"].removesuffix("s"))
                assert value.retry_after == timedelta(seconds=seconds), where
        else:  # pragma: no cover - a new event case needs a comparison here
            raise AssertionError(f"no comparison for {case}")
    return ids


# --- requests ----------------------------------------------------------------------------------


def user(text: str, message_id: str = "u1") -> Message:
    return Message(role=Role.USER, id=message_id, content=[ContentBlock(text=TextBlock(text=text))])


def completion(model: str, *messages: Message, **fields: Any) -> StreamCompletionRequest:
    return StreamCompletionRequest(
        model_id=model,
        messages=list(messages) or [user("hello")],
        call_context=CallContext(session_id="s", turn_id="t"),
        **fields,
    )


# --- the stub upstream -----------------------------------------------------------------------


class GeminiStub(StubUpstream):
    """A Gemini API / Vertex AI stub on 127.0.0.1, answering by path:

    * ``...:streamGenerateContent``: the next queued reply (``queue``); a request naming a
      ``cachedContent`` the stub does not hold (deleted by :meth:`evict`) gets Google's 404;
    * ``.../cachedContents`` (POST): a new entry ``cachedContents/c<N>`` whose
      ``totalTokenCount`` is ``cache_tokens``, or ``cache_status`` with an error body;
    * ``...:countTokens``: ``{"totalTokens": count_tokens}``;
    * ``/token``: an OAuth access token ``ya29.stub-<N>`` valid for an hour, or HTTP 400 with
      ``token_error`` as the body when that is set (a refused refresh);
    * ``GET .../models``: ``listing``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.cache_tokens = 4096
        self.cache_status = 200
        self.caches: dict[str, dict[str, Any]] = {}
        self.count_tokens = 0
        self.created = 0
        self.tokens_issued = 0
        self.token_error: dict[str, Any] | None = None
        self.listing: dict[str, Any] = {}

    def tokens(self) -> list[Seen]:
        return [s for s in self.seen if s.path.split("?")[0].endswith("/token")]

    def streams(self) -> list[Seen]:
        return [s for s in self.seen if ":streamGenerateContent" in s.path]

    def creates(self) -> list[Seen]:
        return [s for s in self.seen if s.path.split("?")[0].endswith("/cachedContents")]

    def evict(self, name: str) -> None:
        del self.caches[name]

    def _route(self, seen: Seen) -> Reply | None:
        path = seen.path.split("?")[0]
        json_headers = {"content-type": "application/json"}
        if path.endswith("/token"):
            if self.token_error is not None:
                return Reply(
                    status=400,
                    headers=json_headers,
                    chunks=[json.dumps(self.token_error).encode()],
                )
            self.tokens_issued += 1
            body = {
                "access_token": f"ya29.stub-{self.tokens_issued}",
                "expires_in": 3600,
                "token_type": "Bearer",
            }
            return Reply(headers=json_headers, chunks=[json.dumps(body).encode()])
        if path.endswith("/cachedContents") and seen.method == "POST":
            if self.cache_status >= 300:
                error = {
                    "error": {
                        "code": self.cache_status,
                        "message": "Cached content is too "
                        "small. total_token_count=12, min_total_token_count=1024",
                        "status": "INVALID_ARGUMENT",
                    }
                }
                return Reply(
                    status=self.cache_status,
                    headers=json_headers,
                    chunks=[json.dumps(error).encode()],
                )
            self.created += 1
            name = f"cachedContents/c{self.created}"
            sent = seen.json()
            self.caches[name] = sent
            body = {
                "name": name,
                "model": sent["model"],
                "usageMetadata": {"totalTokenCount": self.cache_tokens},
                "expireTime": "2026-12-01T12:00:00Z",
            }
            return Reply(headers=json_headers, chunks=[json.dumps(body).encode()])
        if path.endswith(":countTokens"):
            body = {"totalTokens": self.count_tokens}
            return Reply(headers=json_headers, chunks=[json.dumps(body).encode()])
        if seen.method == "GET":
            return Reply(headers=json_headers, chunks=[json.dumps(self.listing).encode()])
        if path.endswith(":streamGenerateContent"):
            named = seen.json().get("cachedContent")
            if named is not None and named not in self.caches:
                error = {
                    "error": {
                        "code": 404,
                        "message": f"CachedContent not found (or permission denied): {named}",
                        "status": "NOT_FOUND",
                    }
                }
                return Reply(status=404, headers=json_headers, chunks=[json.dumps(error).encode()])
        return None

    async def _read_request(self, reader: Any) -> Seen | None:
        seen = await super()._read_request(reader)
        if seen is not None:
            reply = self._route(seen)
            if reply is not None:
                self.replies.appendleft(reply)
        return seen


def stream_reply(*objects: Any) -> Reply:
    """A 200 event-stream answer carrying ``objects`` in Gemini's framing."""
    return Reply(headers={"content-type": "text/event-stream"}, chunks=[sse(*objects)])
