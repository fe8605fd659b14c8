"""Every vendor transcript translates exactly to its expected_events (fixtures README).

Project-authored transcripts are copied into testdata/vendor/. The third-party recordings are
read from ../shared/fixtures/vendor/recorded/ (present in CI, not copied into the project).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol_py.providers.anthropic.stream import AnthropicStreamTranslator
from protocol_py.providers.http.sse import SSEParser
from protocol_py.providers.openai.stream import OpenAIStreamTranslator
from protocol_py.rules.accumulate import accumulate

from ..support.adapters import (
    RECORDED_ABSENT,
    SHARED_RECORDED,
    VENDOR,
    fixture_files,
    fixture_vendor,
    load_fixture,
    transcript_params,
    translate_body,
)
from ._compare import assert_events

PROJECT = fixture_files(VENDOR)
RECORDED = transcript_params(SHARED_RECORDED, absent_reason=RECORDED_ABSENT)


def _run(path: Path) -> None:
    meta, body = load_fixture(path)
    events = translate_body(
        fixture_vendor(meta), meta["http"]["status"], meta["http"]["headers"], body
    )
    assert_events(events, meta["expected_events"])
    # raises StreamOrderError on any order violation (docs/decisions.md#d12)
    folded = accumulate(events)
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
        pytest.skip(RECORDED_ABSENT)
    assert len(RECORDED) >= 16


@pytest.mark.parametrize("path", RECORDED)
def test_recorded_transcript(path: Path) -> None:
    _run(path)


STREAMS = transcript_params(VENDOR, streams_only=True) + transcript_params(
    SHARED_RECORDED, streams_only=True, absent_reason=RECORDED_ABSENT
)


@pytest.mark.parametrize("path", STREAMS)
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


def test_absent_recordings_give_one_named_skip_not_an_empty_parameter_set(
    tmp_path: Path,
) -> None:
    (param,) = transcript_params(tmp_path / "missing", absent_reason=RECORDED_ABSENT)
    (mark,) = param.marks
    assert mark.name == "skip"
    assert mark.args == (RECORDED_ABSENT,)
    assert RECORDED_ABSENT.startswith("../shared/fixtures/vendor/recorded is absent")
    assert transcript_params(tmp_path / "missing") == []
    assert len(transcript_params(VENDOR, streams_only=True)) < len(transcript_params(VENDOR))
