"""Bounded passes over caller text, and large unary calls kept off the event loop.

Not timing assertions (``benchmarks/loop_stall.py`` measures the stalls): each test pins one
mechanism and shows the answers are those of the whole-text computation:

* every regular-expression call of the reference tokenizer sees at most
  ``TOKEN_SLICE_CHARS`` characters whatever the text's shape, and the tokens and counts are
  those of one call over the whole text;
* the reference provider's pause-turn answer, tool-name and proper-name searches go a window at
  a time and find what a whole-text search finds;
* a unary call's request is freed a step at a time in a worker thread (map fields too), its
  reply is encoded there, and a Configure past ``MAX_CONFIG_ENTRIES`` is refused before any
  conversion, with the server still serving afterwards.
"""

from __future__ import annotations

import heapq
import re
import sys
import threading
import weakref
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol_py.codec.structs import from_struct
from protocol_py.providers.reference import provider as reference_provider
from protocol_py.providers.reference import tokenizer as reference
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.providers.reference.tokenizer import (
    TOKEN_COUNT_CHUNK_CHARS,
    TOKEN_SLICE_CHARS,
    count_spans_tokens,
    count_text_tokens,
    tokenize,
)
from protocol_py.server import handlers, offload
from protocol_py.server.config_schema import MAX_CONFIG_ENTRIES, config_entries_within
from protocol_py.server.grpc_layer import limits
from protocol_py.server.grpc_layer.limits import encode_reply
from protocol_py.server.offload import RELEASE_STEP_ITEMS, release_dict_in_steps, release_in_steps
from protocol_py_gen.google.protobuf import ListValue, Struct, Value
from protocol_py_gen.model.v1 import (
    ConfigureRequest,
    RenderRequest,
    RenderResponse,
    StopReason,
    StreamEvent,
)

from .conftest import Served, acall, fuzz_settings, request, still_serving

WHOLE = re.compile(r"\w+|\s+|[^\w\s]", re.UNICODE)
"""The tokenizer's pattern, applied to a whole text: what the sliced passes must agree with."""

SHAPES = {
    "no whitespace": "!" * (3 * TOKEN_SLICE_CHARS + 5),
    "one huge word": "x" * (3 * TOKEN_SLICE_CHARS + 5),
    "combining characters": "e\u0301" * (2 * TOKEN_SLICE_CHARS + 3),
    "emoji": "\U0001f600" * (2 * TOKEN_SLICE_CHARS + 1),
    "whitespace run": " " * (2 * TOKEN_SLICE_CHARS) + "a" * TOKEN_SLICE_CHARS + "\n" * 9,
    "words at the cuts": ("ab " * (TOKEN_SLICE_CHARS // 3 + 1)) * 3,
}


class SliceRecorder:
    """The tokenizer's pattern, recording how many characters each call was given."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def _seen(self, text: str, pos: int, endpos: int) -> None:
        self.sizes.append(min(endpos, len(text)) - pos)

    def findall(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> list[Any]:
        self._seen(text, pos, endpos)
        return WHOLE.findall(text, pos, endpos)

    def finditer(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> Any:
        self._seen(text, pos, endpos)
        return WHOLE.finditer(text, pos, endpos)


@pytest.fixture
def slices(monkeypatch: pytest.MonkeyPatch) -> SliceRecorder:
    recorder = SliceRecorder()
    monkeypatch.setattr(reference, "_TOKEN_RE", recorder)
    return recorder


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_tokenizer_call_sees_a_bounded_slice_and_gives_the_whole_texts_tokens(
    shape: str, slices: SliceRecorder
) -> None:
    text = SHAPES[shape]
    expected = WHOLE.findall(text)
    assert tokenize(text) == expected
    assert count_text_tokens(text) == len(expected)
    spans = [(text, 0, len(text))]
    assert reference._spans_tokens(spans, len(text), 7) == expected[:7]
    assert count_spans_tokens(spans, len(text)) == len(expected)
    assert len(slices.sizes) > 3
    assert max(slices.sizes) <= TOKEN_SLICE_CHARS


@fuzz_settings(60)
@given(
    st.lists(
        st.sampled_from(["a", "Z", "_", "7", " ", "\n", "!", "\u0301", "\U0001f600", "é"]),
        min_size=1,
        max_size=40,
    ),
    st.integers(min_value=1, max_value=3 * TOKEN_SLICE_CHARS),
)
def test_sliced_tokens_equal_whole_text_tokens_for_any_shape(alphabet: list[str], n: int) -> None:
    text = "".join(alphabet[i % len(alphabet)] * (1 + i % 5) for i in range(n))[:n]
    expected = WHOLE.findall(text)
    assert tokenize(text) == expected
    assert count_text_tokens(text) == len(expected)
    assert reference._spans_tokens([(text, 0, len(text))], len(text), 5) == expected[:5]


def test_spans_tokens_join_a_run_across_chunks_of_copied_text() -> None:
    word = "w" * (TOKEN_COUNT_CHUNK_CHARS + 10)
    spans = [("say ", 0, 4), (word + " end", 0, len(word) + 4)]
    assert reference._spans_tokens(spans, 8 + len(word), 4) == ["say", " ", word, " "]
    assert reference._spans_tokens(spans, 8 + len(word), 0) == []


def test_pause_turn_answer_takes_half_the_tokens_counted_in_slices(slices: SliceRecorder) -> None:
    provider = ReferenceProvider()
    spec = provider._spec("reference-large")
    prompt = "please pause turn " + "!" * (3 * TOKEN_SLICE_CHARS)
    plan = provider._plan(
        request(prompt), spec, limit=10 * TOKEN_SLICE_CHARS
    )  # limit above the answer: all of its first half is kept
    head = f"This is {spec.id}, the offline reference model. You wrote: "
    tail = (
        " Here is a deterministic answer: every word above was counted, and nothing "
        "was sent over the network."
    )
    whole = WHOLE.findall(head + prompt + tail)
    assert plan.text == whole[: len(whole) // 2]
    assert plan.stop is not None and plan.stop.vendor_reason == "pause_turn"
    assert max(slices.sizes) <= TOKEN_SLICE_CHARS


@pytest.mark.parametrize("offset", [-12, -1, 0, 1, 5])
def test_tool_name_is_found_case_insensitively_up_to_the_lookup_bound(offset: int) -> None:
    """A name is found when it ends within the first LOOKUP_PROMPT_CHARS characters (the
    character after it still read, for the word boundary), and not past them."""
    bound = reference_provider.LOOKUP_PROMPT_CHARS
    at = bound - len("get_weather") + offset
    text = "." * at + "Get_Weather now" + "." * 30
    found = list(reference_provider._PromptLookups(text).occurrences("get_weather"))
    assert found == ([at] if offset <= 0 else [])
    glued = "." * at + "xget_weather"
    assert list(reference_provider._PromptLookups(glued).occurrences("get_weather")) == []
    ended = "." * (bound - len("get_weather")) + "get_weatherx"  # the bound cuts a longer word
    assert list(reference_provider._PromptLookups(ended).occurrences("get_weather")) == []


@pytest.mark.parametrize("offset", [-2, -1, 0, 1, 5])
def test_proper_name_search_by_windows_starts_where_the_whole_search_does(offset: int) -> None:
    pattern = reference_provider._PROPER_NAME_RE
    text = "weather " * ((TOKEN_COUNT_CHUNK_CHARS + offset) // 8) + "in Paris today"
    whole = pattern.search(text)
    windowed = reference_provider._search_windows(pattern, text, 40)
    assert whole is not None and windowed is not None
    assert (windowed.start(), windowed.group(1)) == (whole.start(), "Paris")
    start = "Oslo " + "x" * (2 * TOKEN_COUNT_CHUNK_CHARS)  # the first word starts the text
    assert reference_provider._search_windows(pattern, start, 40) is None


# -- freeing and encoding off the loop ---------------------------------------------------------


class Tracked:
    """A weakly referenceable stand-in for a decoded object (plain values cannot be)."""


def test_a_long_map_field_is_emptied_a_bounded_step_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps: list[int] = []
    entries = 3 * RELEASE_STEP_ITEMS + 7
    options = Struct(fields={f"k{i}": Value(number_value=i) for i in range(entries)})
    value = options.fields["k5"]
    gone = weakref.ref(value)
    del value
    completion = request("hello")
    completion.provider_options = options
    del options
    real_empty = offload._empty_dict

    def recording(items: dict[Any, Any], pending: list[Any]) -> None:
        steps.append(len(items))
        real_empty(items, pending)
        assert items == {}

    monkeypatch.setattr(offload, "_empty_dict", recording)
    held = [completion]
    del completion
    release_in_steps(held)
    assert steps == [entries]
    assert gone() is None


def test_a_shared_map_field_is_left_unchanged() -> None:
    fields = {f"k{i}": Value(number_value=i) for i in range(2 * RELEASE_STEP_ITEMS)}
    options = Struct(fields=fields)
    completion = request("hello")
    completion.provider_options = options
    held = [completion]
    del completion
    release_in_steps(held)
    assert len(options.fields) == 2 * RELEASE_STEP_ITEMS  # still ours: not emptied


def test_a_refused_config_dict_is_emptied_in_steps_with_its_long_values() -> None:
    inner = [Tracked() for _ in range(2 * RELEASE_STEP_ITEMS)]
    probe = weakref.ref(inner[3])
    config: dict[str, Any] = {f"k{i}": i for i in range(3 * RELEASE_STEP_ITEMS)}
    config["nested"] = {"list": inner}
    config["long"] = list(inner)
    del inner
    release_dict_in_steps(config)
    assert config == {}
    assert probe() is None


def test_config_entries_are_counted_at_every_depth_and_stop_past_the_bound() -> None:
    nested = Struct(
        fields={
            "a": Value(struct_value=Struct(fields={"b": Value(number_value=1)})),
            "c": Value(list_value=ListValue(values=[Value(number_value=2)] * 3)),
        }
    )
    assert config_entries_within(nested, bound=6)  # a, b, c and three elements
    assert not config_entries_within(nested, bound=5)
    assert config_entries_within(None)


async def test_a_config_past_the_entry_bound_is_refused_before_upb_parse_and_conversion(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    converted: list[int] = []
    real = from_struct

    def counting(struct: Any, **kwargs: Any) -> Any:
        converted.append(1)
        return real(struct, **kwargs)

    parsed: list[int] = []
    real_parse = limits.strict_parse

    def parse(strict: Any, data: bytes, **kwargs: Any) -> Any:
        parsed.append(len(data))
        return real_parse(strict, data, **kwargs)

    monkeypatch.setattr(handlers, "from_struct", counting)
    monkeypatch.setattr(limits, "strict_parse", parse)
    fields = {f"k{i:06d}": Value(number_value=i) for i in range(MAX_CONFIG_ENTRIES + 1)}
    body = bytes(ConfigureRequest(config=Struct(fields=fields)))
    refused = await acall(served.address, "Configure", body, timeout=60)
    assert refused.code == "INVALID_ARGUMENT", refused
    assert refused.details.startswith(
        f"config: more than {MAX_CONFIG_ENTRIES} object members and array elements "
        "(bound MAX_CONFIG_ENTRIES"
    )
    assert converted == []
    assert parsed == []  # refused before upb's parse (one C call over the whole body)
    await still_serving(served)
    assert parsed  # the calls after it are parsed as before


async def test_a_large_configure_is_checked_and_freed_in_worker_threads(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: dict[str, str] = {}
    real_release = offload.release_in_steps

    def release(held: list[Any]) -> None:
        threads["release"] = threading.current_thread().name
        threads["released"] = type(held[0]).__name__
        real_release(held)

    def nsmallest(n: int, keys: Any) -> list[Any]:
        threads["nsmallest"] = threading.current_thread().name
        return heapq.nsmallest(n, keys)

    class Heapq:
        pass

    fake = Heapq()
    fake.nsmallest = nsmallest  # type: ignore[attr-defined]
    monkeypatch.setattr(offload, "release_in_steps", release)
    monkeypatch.setattr(handlers, "heapq", fake)
    fields = {f"unknown_{i:05d}": Value(number_value=i) for i in range(MAX_CONFIG_ENTRIES)}
    body = bytes(ConfigureRequest(config=Struct(fields=fields)))
    assert len(body) >= offload.OFFLOAD_MIN_BYTES
    refused = await acall(served.address, "Configure", body, timeout=60)
    assert refused.code == "INVALID_ARGUMENT", refused
    assert f"invalid config: {MAX_CONFIG_ENTRIES} error(s)" in refused.details
    assert threads["nsmallest"].startswith("protocol-py-cpu"), threads
    assert threads["release"].startswith("protocol-py-cpu"), threads
    assert threads["released"] == "ConfigureRequest"
    await still_serving(served)


async def test_a_render_reply_under_a_mib_is_encoded_on_the_loop_as_the_provider_returns_it(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    real = encode_reply

    def encode(message: Any, max_send: int) -> Any:
        threads.append(threading.current_thread().name)
        return real(message, max_send)

    monkeypatch.setattr(handlers, "encode_reply", encode)
    payload = b'{"text": "ab", "times": 100000}'
    body = bytes(RenderRequest(payload_type="reference.repeat", payload=payload))
    rendered = await acall(served.address, "Render", body, timeout=60)
    assert rendered.code == "OK", rendered
    assert RenderResponse.parse(rendered.replies[0]).text == "ab" * 100_000
    # Under LARGE_REPLY_BYTES: not counted by the reply budget, so not left waiting for a
    # worker thread (a larger one is counted first, then encoded in a worker:
    # tests/reliability/test_reply_budget.py).
    assert threads == [threading.main_thread().name], threads
    describe = await acall(served.address, "Describe", b"")
    assert describe.code == "OK", describe
    assert threads[1:] == [threading.main_thread().name]


async def test_a_long_pause_turn_prompt_is_answered_as_before(served: Served) -> None:
    prompt = "pause turn " + "!" * (2 * TOKEN_SLICE_CHARS)
    call = request(prompt)
    result = await acall(served.address, "StreamCompletion", bytes(call), stream=True, timeout=60)
    assert result.code == "OK", result
    events = [StreamEvent.parse(r) for r in result.replies]
    text = "".join(e.text_delta.text for e in events if e.text_delta is not None)
    head = "This is reference-large, the offline reference model. You wrote: "
    tail = (
        " Here is a deterministic answer: every word above was counted, and nothing "
        "was sent over the network."
    )
    whole = WHOLE.findall(head + prompt + tail)
    assert text == "".join(whole[: len(whole) // 2])
    assert events[-1].stop is not None
    assert events[-1].stop.reason == StopReason.PAUSE_TURN
    await still_serving(served)
