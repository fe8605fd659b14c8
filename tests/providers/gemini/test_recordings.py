"""Every real Gemini / Vertex recording translates to exact events, usage and cost.

The recordings (``../shared/fixtures/vendor/recorded/gemini/``, third-party data read in place)
each carry ``proposed_expected_events``, an outside reading of the mapping. The adapter's
mapping (docs/adapters.md "Gemini") differs from it in three documented ways, applied here to
the proposal to get the exact expectation:

1. a call without a vendor id gets a synthetic id ``gemini_<ULID>`` (the proposal's
   ``gemini_synth_<responseId>_<n>`` numbers calls per stream);
2. a call with a vendor id also carries it as vendor data ``gemini.function_call.id`` (so that
   only vendor ids are ever sent back);
3. for a kernel of protocol 1.2 a text part's signature is vendor data on the text delta of
   that part, which starts its own block, instead of the 1.1 thinking_signature after the text.

For a kernel of 1.0/1.1 (no ``kernel_protocol_version``) only 1 and 2 apply.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from protocol_py.providers.catalog import discovered_model
from protocol_py.providers.gemini.models import gemini_models
from protocol_py.providers.gemini.parts import FUNCTION_CALL_ID, THOUGHT_SIGNATURE
from protocol_py.rules.accumulate import accumulate
from protocol_py.rules.cost import cost

from ._gemini import (
    RECORDED,
    RECORDED_ABSENT,
    assert_events,
    load_recording,
    recording_paths,
    run_recording,
)

PATHS = recording_paths()
PARAMS = [pytest.param(p, id=p.stem) for p in PATHS] or [
    pytest.param(None, id="recorded-absent", marks=pytest.mark.skip(RECORDED_ABSENT))
]

COST_USD = {
    # USD, worked by hand from the catalog rates (docs of protocol_py.providers.gemini.models)
    # gemini-1.5-flash is not served: priced as --discover prices an unknown id on Google's own
    # URL, at the catalog's highest rates (input 4.00): 14 x 4.00
    "gemini15flash_safety_blocked_empty_content": "0.000056",
    # 2.5 Flash: 334 x 0.30 + 68 x 2.50 + 17,379 x 0.03 (cache read) + 821 x 2.50 (thoughts)
    "gemini25flash_implicit_cache_hit_usage_by_modality": "0.00284407",
    # 2.5 Flash: 121 x 0.30 + 36 x 2.50 + 38 x 2.50
    "gemini25flash_parallel_calls_one_event": "0.0002213",
    # 2.5 Flash: 54 x 0.30 + 14 x 2.50 + 62 x 2.50
    "gemini25flash_thought_then_signed_call_with_stop": "0.0002062",
    # 2.5 Pro below 200k: 34 x 1.25 + 469 x 10 + 787 x 10
    "gemini25pro_thought_summaries_signed_first_text": "0.0126025",
    # 3 Pro below 200k: 157 x 2 + 32 x 12 + 438 x 12
    "gemini3_parallel_calls_ids_first_signed": "0.005954",
    # 2.5 Pro below 200k: 73 x 1.25 + 25 x 10 + 83 x 10
    "vertex_gemini25pro_usage_last_only_signed_text": "0.00117125",
}
"""The exact cost of each recording that reports usage."""


def _requested_model(meta: dict[str, Any]) -> str:
    return str(meta["request"]["url"]).rsplit("/models/", 1)[1].split(":")[0]


def _signed_parts(body: bytes) -> list[tuple[str, str]]:
    """(text, signature) of each signed non-thought text part on the wire, in order."""
    out = []
    for line in body.split(b"\r\n"):
        if not line.startswith(b"data: "):
            continue
        obj = json.loads(line[6:])
        for candidate in obj.get("candidates", [])[:1]:
            for part in candidate.get("content", {}).get("parts", []):
                if "thoughtSignature" in part and "text" in part and not part.get("thought"):
                    out.append((part["text"], part["thoughtSignature"]))
    return out


def our_mapping(meta: dict[str, Any], body: bytes, *, kernel_1_2: bool) -> list[dict[str, Any]]:
    """The proposal with the adapter's three documented differences (module docstring)."""
    expected = copy.deepcopy(meta["proposed_expected_events"])
    for event in expected:
        start = event.get("tool_call_start")
        if start is not None and not start["id"].startswith("gemini_synth_"):
            start.setdefault("vendor_data", []).append(
                {"location": FUNCTION_CALL_ID, "value": start["id"]}
            )
    if not kernel_1_2:
        return expected
    signed = _signed_parts(body)
    out: list[dict[str, Any]] = []
    run_start: int | None = None
    for event in expected:
        if "text_delta" in event:
            if run_start is None:
                run_start = len(out)
            out.append(event)
            continue
        if "thinking_signature" in event and run_start is not None:
            text, signature = signed.pop(0)
            first = out[run_start]["text_delta"]
            assert first["text"] == text  # the signed part is the first of its text run
            assert event["thinking_signature"]["signature"] == signature
            first["vendor_data"] = [{"location": THOUGHT_SIGNATURE, "value": signature}]
            first["new_block"] = True
            run_start = None
            continue
        run_start = None
        out.append(event)
    assert signed == []  # every signed text part was accounted for
    return out


def test_recordings_folder_holds_every_case() -> None:
    if not RECORDED.is_dir():
        pytest.skip(RECORDED_ABSENT)
    assert len(PATHS) == 9


@pytest.mark.parametrize("kernel_1_2", [False, True], ids=["kernel-1.1", "kernel-1.2"])
@pytest.mark.parametrize("path", PARAMS)
def test_recording_translates_exactly(path: Path, kernel_1_2: bool) -> None:
    meta, body = load_recording(path)
    events = run_recording(meta, body, text_vendor_data=kernel_1_2)
    assert_events(events, our_mapping(meta, body, kernel_1_2=kernel_1_2))
    folded = accumulate(events)  # raises on any order violation (docs/decisions.md#d12)
    assert folded.complete
    assert folded.tool_call_errors == {}
    assert folded.open_tool_calls == []


@pytest.mark.parametrize("path", PARAMS)
def test_recording_fed_one_byte_at_a_time_gives_the_same_events(path: Path) -> None:
    meta, body = load_recording(path)
    if meta["http"]["status"] != 200:
        pytest.skip("an HTTP error answer has no stream to re-chunk")
    whole = run_recording(meta, body)
    dribbled = run_recording(meta, body, chunk=1)
    assert len(dribbled) == len(whole)
    for a, b in zip(dribbled, whole, strict=True):
        if a.tool_call_start is not None:  # synthetic ids differ between runs
            assert b.tool_call_start is not None
            assert (a.tool_call_start.name, list(a.tool_call_start.vendor_data)) == (
                b.tool_call_start.name,
                list(b.tool_call_start.vendor_data),
            )
        elif a.tool_call_delta is None and a.tool_call_done is None:
            assert bytes(a) == bytes(b)


@pytest.mark.parametrize("path", PARAMS)
def test_recording_usage_costs_exactly(path: Path) -> None:
    meta, body = load_recording(path)
    usage = next((e.usage for e in run_recording(meta, body) if e.usage is not None), None)
    if path.stem not in COST_USD:
        assert usage is None  # nothing was reported, nothing is billed
        return
    assert usage is not None
    specs = {s.id: s for s in gemini_models()}
    model = _requested_model(meta)
    spec = specs.get(model) or discovered_model(model, priced_like=list(specs.values()))
    assert spec.pricing is not None
    breakdown = cost(spec.pricing, usage, datetime(2026, 12, 1, tzinfo=UTC))
    assert breakdown.total == Decimal(COST_USD[path.stem])


@pytest.mark.parametrize("path", PARAMS)
def test_text_signature_survives_accumulation_on_its_part(path: Path) -> None:
    """Kernel 1.2: the accumulated text block of a signed part carries the signature bytes
    exactly; kernel 1.1: a signature-only thinking block follows that text block."""
    meta, body = load_recording(path)
    signed = _signed_parts(body) if meta["http"]["status"] == 200 else []
    if not signed:
        pytest.skip("no signed text part in this recording")
    new = accumulate(run_recording(meta, body, text_vendor_data=True)).message.content
    texts = [b.text for b in new if b.text is not None]
    assert [(v.location, v.value) for v in texts[0].vendor_data] == [
        (THOUGHT_SIGNATURE, signed[0][1].encode())
    ]
    assert texts[0].text.startswith(signed[0][0])
    old = accumulate(run_recording(meta, body, text_vendor_data=False)).message.content
    kinds = [next(iter(b.to_dict())) for b in old]
    assert kinds[-2:] == ["text", "thinking"]
    assert old[-1].thinking is not None
    assert (old[-1].thinking.text, old[-1].thinking.signature) == ("", signed[0][1].encode())
