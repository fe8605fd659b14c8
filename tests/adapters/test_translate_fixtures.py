"""Every vendor transcript translates exactly to its expected_events (fixtures README).

Project-authored transcripts are copied into testdata/vendor/. The third-party recordings are
read from ../shared/fixtures/vendor/recorded/ (present in CI, not copied into the project).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol_py.accumulate import accumulate
from protocol_py.providers._anthropic_stream import AnthropicStreamTranslator
from protocol_py.providers._openai_stream import OpenAIStreamTranslator
from protocol_py.sse import SSEParser

from ._compare import assert_events
from ._support import (
    SHARED_RECORDED,
    VENDOR,
    fixture_files,
    fixture_vendor,
    load_fixture,
    translate_body,
)

PROJECT = fixture_files(VENDOR)
RECORDED = fixture_files(SHARED_RECORDED) if SHARED_RECORDED.is_dir() else []


def _run(path: Path) -> None:
    meta, body = load_fixture(path)
    events = translate_body(
        fixture_vendor(meta), meta["http"]["status"], meta["http"]["headers"], body
    )
    assert_events(events, meta["expected_events"])
    folded = accumulate(events)  # raises StreamOrderError on any D12 violation
    assert folded.complete
    if fixture_vendor(meta) == "anthropic" and folded.stop is not None:
        assert folded.unreplayable_blocks == []  # every Anthropic thinking block is signed
    assert folded.tool_call_errors == {}


def test_project_transcripts_present() -> None:
    assert len(PROJECT) >= 10


@pytest.mark.parametrize("path", PROJECT, ids=[p.stem for p in PROJECT])
def test_project_transcript(path: Path) -> None:
    _run(path)


def test_recorded_folder_present() -> None:
    if not SHARED_RECORDED.is_dir():
        pytest.skip(f"{SHARED_RECORDED} is absent: third-party recordings are not in this checkout")
    assert len(RECORDED) >= 16


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
def test_recorded_transcript(path: Path) -> None:
    _run(path)


STREAMS = [p for p in PROJECT + RECORDED if load_fixture(p)[0]["http"]["status"] == 200]


@pytest.mark.parametrize("path", STREAMS, ids=[p.stem for p in STREAMS])
def test_transcript_byte_by_byte(path: Path) -> None:
    """Feeding the body one byte at a time changes nothing."""
    meta, body = load_fixture(path)
    headers = meta["http"]["headers"]
    translator = (
        AnthropicStreamTranslator(headers)
        if fixture_vendor(meta) == "anthropic"
        else OpenAIStreamTranslator(headers)
    )
    parser = SSEParser()
    events = []
    for i in range(len(body)):
        for sse in parser.feed(body[i : i + 1]):
            events.extend(translator.on_event(sse))
    events.extend(translator.on_eof())
    assert_events(events, meta["expected_events"])
