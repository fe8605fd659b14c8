"""No 60 MB single-call copy left beside the text's own decode.

Not timing assertions (``benchmarks/loop_stall.py`` measures the stall): each test pins one
mechanism, and the server tests show it still serving afterwards:

* a request's message wire images are scanned once and shared by the translation cache and the
  validation memo; an image over the bound is None (never copied, hashed, cached or kept);
* a large message is translated and validated uncached, and a list holding one is not kept as a
  conversation prefix; two different large messages never hit each other's entries;
* the reference provider's request digest is hashed part by part and equals the sha256 of the
  whole encoding; its answer to a long prompt is searched and tokenized from bounded slices
  with exactly the outputs of building the whole answer.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

import pytest

from protocol_py.codec import wire
from protocol_py.codec.prefixes import ConversationPrefixes
from protocol_py.codec.wire_gen import LONG_TEXT_CHARS, LongText, varint_bytes
from protocol_py.providers.http.translation_cache import (
    MAX_KEY_BYTES,
    TranslationCache,
    content_key,
    message_key,
)
from protocol_py.providers.reference import ReferenceProvider, reference_models
from protocol_py.providers.reference import tokenizer as reference
from protocol_py.rules import request as request_rules
from protocol_py.rules.request import validate_request
from protocol_py.rules.request_memo import (
    MAX_IMAGE_BYTES,
    ValidatedMessages,
    ValidState,
    take_request_images,
    valid_prefixes,
)
from protocol_py.server import offload
from protocol_py.server.grpc_layer import limits
from protocol_py.server.reflection import build_descriptor_pool
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import GenerationParams, StreamCompletionRequest, StreamEvent

from .conftest import Served, acall, serve, still_serving

MIB = 1024 * 1024


def user(text: str, msg_id: str) -> Message:
    return Message(role=Role.USER, id=msg_id, content=[ContentBlock(text=TextBlock(text=text))])


def conversation(big: str) -> StreamCompletionRequest:
    """Two small messages around one larger than the image bound."""
    return StreamCompletionRequest(
        model_id="reference-large",
        messages=[
            user("hello", "01J00000000000000000000001"),
            user(big, "01J00000000000000000000002"),
            user("and then", "01J00000000000000000000003"),
        ],
        params=GenerationParams(max_output_tokens=400),
        call_context=CallContext(session_id="s", turn_id="t"),
    )


@pytest.fixture(scope="module")
def strict() -> Any:
    return limits.strict_request_classes(build_descriptor_pool())[StreamCompletionRequest]


def test_message_images_are_scanned_once_and_a_large_one_is_not_copied(
    strict: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    scans: list[int] = []
    real = wire.field_images

    def counted(
        data: bytes, number: int, max_bytes: int | None = None, rest: list[bytes] | None = None
    ) -> Any:
        scans.append(number)
        return real(data, number, max_bytes, rest)

    monkeypatch.setattr(wire, "field_images", counted)
    data = wire.encode(conversation("x" * (MAX_IMAGE_BYTES + 10)))
    request = limits.decode_request(data, StreamCompletionRequest, strict)
    assert len(scans) == 1
    for_translation = wire.take_images(request, "messages")
    for_validation = take_request_images(request)
    assert for_translation is not None
    assert for_translation is for_validation  # one list, shared
    assert for_translation[1] is None  # the large message: no image, no copy
    assert for_translation[0] == wire.encode(request.messages[0])
    assert for_translation[2] == wire.encode(request.messages[2])


def test_an_image_at_the_bound_is_kept_and_one_byte_more_is_not() -> None:
    def body(image_size: int) -> bytes:
        return b"\x0a" + varint_bytes(image_size) + b"a" * image_size

    assert wire.field_images(body(MAX_IMAGE_BYTES), 1, MAX_IMAGE_BYTES) == [b"a" * MAX_IMAGE_BYTES]
    assert wire.field_images(body(MAX_IMAGE_BYTES + 1), 1, MAX_IMAGE_BYTES) == [None]
    assert wire.field_images(body(MAX_IMAGE_BYTES + 1), 1) == [b"a" * (MAX_IMAGE_BYTES + 1)]


def test_two_different_large_messages_never_hit_each_others_translation() -> None:
    cache = TranslationCache()
    translated: list[str] = []

    def translate(i: int, message: Message) -> bytes:
        translated.append(message.content[0].text.text[:1])  # type: ignore[union-attr]
        return message.content[0].text.text[:1].encode()  # type: ignore[union-attr]

    big_a = conversation("a" * (MAX_IMAGE_BYTES + 1)).messages
    big_b = conversation("b" * (MAX_IMAGE_BYTES + 1)).messages
    images = [b"small-1", None, b"small-3"]  # as take_images gives them for these lists
    first = cache.fragments("s", big_a, translate, images)
    second = cache.fragments("s", big_b, translate, images)
    assert first == [b"h", b"a", b"a"]
    assert second == [b"h", b"b", b"a"]
    assert translated == ["h", "a", "a", "b"]  # the small ones hit; each large one translated
    assert len(cache) == 2  # the two small messages only
    assert len(cache._lists) == 0  # a list holding a large message is not kept
    # the single-message path: a large message is translated, never keyed
    assert cache.fragment("s", big_b[1], lambda m: b"fresh", large=True) == b"fresh"
    assert len(cache) == 2


def test_a_large_message_built_in_python_is_not_keyed_and_is_not_encoded_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    big = user("x" * (MAX_KEY_BYTES + 1), "01J00000000000000000000009")
    small = user("x", "01J00000000000000000000009")

    def no_join(message: Any) -> bytes:
        raise AssertionError("a large message was encoded whole")

    assert message_key(small) == content_key(wire.encode(small))
    monkeypatch.setattr(wire, "encode", no_join)
    assert message_key(big) is None
    assert message_key(user("y" * (MAX_KEY_BYTES + 1), big.id)) is None


def test_a_large_message_is_validated_uncached_and_its_list_not_kept(
    strict: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    memo = ValidatedMessages()
    prefixes: ConversationPrefixes[ValidState] = valid_prefixes()
    monkeypatch.setattr(request_rules, "VALIDATED", memo)
    monkeypatch.setattr(request_rules, "PREFIXES", prefixes)
    for letter in "ab":  # two different large messages under the same id
        data = wire.encode(conversation(letter * (MAX_IMAGE_BYTES + 1)))
        request = limits.decode_request(data, StreamCompletionRequest, strict)
        assert validate_request(request, reference_models()[0]) == []
    assert len(memo) == 2  # the two small messages, not the large one
    assert memo.hits == 2  # the second request hit the small ones only
    assert len(prefixes) == 0
    # a large message holding a violation is reported every time (walked, not remembered)
    bad = conversation("c" * (MAX_IMAGE_BYTES + 1))
    bad.messages[1].role = Role.UNSPECIFIED
    request = limits.decode_request(wire.encode(bad), StreamCompletionRequest, strict)
    found = validate_request(request, reference_models()[0])
    assert [v.rule for v in found] == ["request.message.role_unspecified"]


@pytest.mark.parametrize("text", ["x" * LONG_TEXT_CHARS, "é" * (LONG_TEXT_CHARS + 3) + "z"])
def test_long_text_is_encoded_in_pieces_with_the_same_bytes_and_digest(text: str) -> None:
    message = conversation(text)
    expected = bytes(message)  # betterproto2's own encoding
    assert wire.encode(message) == expected
    assert wire.encoded_size(message) == len(expected)
    assert wire.sha256_of(message).hexdigest() == hashlib.sha256(expected).hexdigest()
    part = LongText(text)
    pieces = list(part.pieces())
    assert b"".join(pieces) == text.encode()
    assert len(part) == len(text.encode())
    assert max(len(p) for p in pieces) <= 2 * LONG_TEXT_CHARS  # "é" is two bytes


# -- the reference provider's answer to a long prompt -------------------------------------------


def old_answer_tokens(prompt: str, stops: list[str], limit: int) -> tuple[list[str], str | None]:
    """The reference provider's answer as built before: the whole answer string, then cut."""
    prompt = prompt.strip()
    answer = (
        f"This is reference-large, the offline reference model. You wrote: {prompt} "
        "Here is a deterministic answer: every word above was counted, and nothing "
        "was sent over the network."
    )
    matched: str | None = None
    cut = len(answer)
    for seq in stops:
        pos = answer.find(seq)
        if seq and pos != -1 and pos < cut:
            cut, matched = pos, seq
    matches = itertools.islice(reference._TOKEN_RE.finditer(answer[:cut]), limit + 1)
    return [m.group() for m in matches], matched


CHUNK = reference.TOKEN_COUNT_CHUNK_CHARS


@pytest.mark.parametrize(
    ("prompt", "stops", "limit"),
    [
        ("  hello there  ", [], 100),
        ("  hello there  ", ["there"], 100),
        (" " * (CHUNK + 5) + "word " * 10 + " " * (CHUNK + 7), ["word"], 50),
        ("ab " * (CHUNK // 3 + 100) + "STOP here", ["STOP", "here"], 10),
        ("ab " * (CHUNK // 3 + 100) + "STOP here", ["STOP"], 1_000_000),
        ("q" * (2 * CHUNK + 11) + " tail", ["tail", ""], 5),
        ("x" * (CHUNK - 2) + "STOP", ["STOP"], 3),  # a stop sequence across a window edge
        ("x" * (CHUNK - 2) + "STOP", ["nowhere", "wrote"], 3),
        ("\n\t " * CHUNK, [], 20),  # all whitespace: an empty prompt
    ],
)
def test_reference_answer_to_a_long_prompt_is_unchanged(
    prompt: str, stops: list[str], limit: int
) -> None:
    provider = ReferenceProvider()
    spec = provider._spec("reference-large")
    request = StreamCompletionRequest(
        model_id="reference-large",
        messages=[user(prompt, "01J00000000000000000000001")],
        params=GenerationParams(max_output_tokens=limit, stop_sequences=stops),
    )
    plan = provider._plan(request, spec, limit)
    tokens, matched = old_answer_tokens(prompt, stops, limit)
    assert "".join(plan.text) == "".join(tokens[: limit - len(plan.thinking)])
    assert plan.text == tokens[: limit - len(plan.thinking)]
    if plan.stop is not None and matched is not None and len(tokens) <= limit - len(plan.thinking):
        assert plan.stop.matched_stop_sequence == matched


def test_reference_spans_find_and_strip_agree_with_whole_strings() -> None:
    text = " \n" * (CHUNK + 1) + "core " + "y" * (2 * CHUNK) + " \t" * (CHUNK + 3)
    lo, hi = reference._strip_span(text)
    assert text[lo:hi] == text.strip()
    spans = [("head ", 0, 5), (text, lo, hi), (" tail", 0, 5)]
    whole = "head " + text.strip() + " tail"
    total = len(whole)
    assert reference._spans_slice(spans, 0, total) == whole
    for needle in ["core", "y" * 3, "y tail", "head core", "missing", "l"]:
        assert reference._spans_find(spans, needle, total) == whole.find(needle), needle


# -- the server, afterwards ----------------------------------------------------------------------


async def test_server_digest_and_answer_for_a_large_message_then_still_serving(
    served: Served,
) -> None:
    big = "word " * (MAX_IMAGE_BYTES // 5 + 100) + "  "
    request = conversation(big)
    body = bytes(request)
    decoded = limits.decode_request(body, StreamCompletionRequest, None)
    digest = hashlib.sha256(bytes(decoded))  # the digest as computed before: of the encoding
    for _ in range(2):  # twice: nothing large was cached between them
        result = await acall(served.address, "StreamCompletion", body, stream=True, timeout=60)
        assert result.code == "OK", result
        events = [StreamEvent.parse(r) for r in result.replies]
        start = events[0].stream_start
        assert start is not None
        assert start.provider_request_id.endswith("_" + digest.hexdigest()[:12])
        text = "".join(e.text_delta.text for e in events if e.text_delta is not None)
        assert "the offline reference model. You wrote: and then Here is" in text
        assert events[-1].stop is not None
    await still_serving(served)


@pytest.mark.parametrize(
    "parts",
    [
        ("[user]\n", "hello", "\n"),
        ("[user]\n", "  leading space", " trailing ", "\n"),
        ("[user]\n", "word", "glued", "\n"),
        ("[assistant]\n", "a.", ".b", "", "\t\n", "\n"),
        ("[user]\n", "é" * 10, "ß" * 3, "_x", "\n"),
        ("[user]\n", ("w " * (CHUNK // 2 + 7)) + "end", "\n"),
    ],
)
def test_tokens_of_message_parts_equal_tokens_of_the_joined_text(parts: tuple[str, ...]) -> None:
    assert reference.count_parts_tokens(parts) == reference.count_text_tokens("".join(parts))
    pieces = list(reference._utf8_pieces(parts))
    assert b"".join(pieces) == "".join(parts).encode("utf-8")


def test_prompt_cache_digests_are_those_of_the_joined_texts() -> None:
    texts = ["first " * 50, "x" * (CHUNK + 3) + " second", "third"]
    request = StreamCompletionRequest(
        model_id="reference-large",
        messages=[user(t, f"01J0000000000000000000000{i}") for i, t in enumerate(texts)],
        call_context=CallContext(session_id="s", turn_id="t"),
    )
    provider = ReferenceProvider()
    spec = provider._spec("reference-large")
    segments = reference.prompt_segments(list(request.messages), [], [])
    assert [s.text for s in segments] == [f"[user]\n{t}\n" for t in texts]
    provider._cache_usage(request, spec, segments)
    digest = b""
    expected = []
    for segment in segments[:-1]:  # the last message is not cached
        digest = hashlib.sha256(digest + segment.text.encode("utf-8")).digest()
        expected.append(spec.id.encode() + b"\0" + digest)
    assert list(provider._cache) == expected


async def test_the_cpu_worker_threads_start_with_the_server_not_on_a_large_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fresh: list[Any] = []
    monkeypatch.setattr(offload, "_workers", fresh)  # as in a process that never used the pool
    run = await serve()
    executors: list[Any] = []
    try:
        assert len(fresh) == 1  # made by start(), before any request
        executors = fresh[0]._threads
        assert len(executors) == offload.MAX_CPU_JOBS
        assert all(len(executor._threads) == 1 for executor in executors)  # each thread started
        await still_serving(run)
    finally:
        await run.server.shutdown(grace_period=0)
        for executor in executors:
            executor.shutdown(wait=False)
