"""Runs testdata/conformance/gemini_usage.json: Gemini ``usageMetadata`` -> Usage (format:
testdata/conformance/README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from protocol_py.codec import protojson
from protocol_py.providers.gemini.usage import CacheCharge, has_counts, map_gemini_usage
from protocol_py_gen.model.v1 import Usage

DATA = Path(__file__).resolve().parents[2] / "testdata" / "conformance"
VECTORS = json.loads((DATA / "gemini_usage.json").read_text(encoding="utf-8"))["vectors"]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_gemini_usage(vector: dict[str, Any]) -> None:
    raw = vector["usage_metadata"]
    created = vector.get("cache_created")
    charge = CacheCharge(created["tokens"], created["ttl_seconds"]) if created else None
    if vector["expected"] is None:
        assert not has_counts(raw) and charge is None
        return
    assert has_counts(raw)
    expected = protojson.decode_or_raise(Usage, vector["expected"])
    assert map_gemini_usage(raw, charge) == expected


def test_vectors_cover_every_rule() -> None:
    names = " ".join(v["name"] for v in VECTORS)
    for rule in (
        "implicit cache",
        "older convention",
        "neither",
        "tool results",
        "created",
        "reading",
        "count-less",
        "negative",
        "dropped",
    ):
        assert rule in names, rule
