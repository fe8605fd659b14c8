"""Shared helpers for the adapter tests: case and fixture loading, event comparison."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import betterproto2

from protocol_py_gen.model.v1 import StreamEvent

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "testdata" / "cases"
VENDOR = REPO / "testdata" / "vendor"
SHARED_RECORDED = REPO.parent / "shared" / "fixtures" / "vendor" / "recorded"


def load_case(case_id: str) -> dict[str, Any]:
    """Load testdata/cases/<id>.json."""
    with (CASES / f"{case_id}.json").open(encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def lines_to_bytes(lines: list[str], terminator: str = "\n") -> bytes:
    """Frame a case's ``lines`` array as an SSE body (every line, including the last, ended)."""
    return "".join(line + terminator for line in lines).encode("utf-8")


def case_chunks(text: str) -> bytes:
    """Decode a case chunk written with literal ``\\n``/``\\r`` escapes and ``<U+XXXX>`` marks."""
    out = text.replace("\\r", "\r").replace("\\n", "\n")
    while "<U+" in out:
        i = out.index("<U+")
        j = out.index(">", i)
        out = out[:i] + chr(int(out[i + 3 : j], 16)) + out[j + 1 :]
    return out.encode("utf-8")


def kind(event: StreamEvent) -> str:
    """The oneof case of an event."""
    name, _ = betterproto2.which_one_of(event, "event")
    return name


def kinds(events: list[StreamEvent]) -> list[str]:
    """The oneof cases of a list of events."""
    return [kind(e) for e in events]
