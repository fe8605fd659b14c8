"""Runs the language-neutral validation vectors (testdata/conformance/validation.md):
capabilities.json, requests.json and routing.json, one test per vector."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from protocol_py.codec import protojson
from protocol_py.errors import Violation
from protocol_py.rules.documents import validate_document
from protocol_py.rules.request import validate_request
from protocol_py.rules.routing import route
from protocol_py_gen.model.v1 import ModelSpec, ModelTarget, StreamCompletionRequest

CONFORMANCE = Path(__file__).resolve().parents[2] / "testdata" / "conformance"


def _vectors(name: str) -> list[dict[str, Any]]:
    data = json.loads((CONFORMANCE / name).read_text(encoding="utf-8"))
    vectors: list[dict[str, Any]] = data["vectors"]
    return vectors


def _ids(vectors: list[dict[str, Any]]) -> list[str]:
    return [v["name"] for v in vectors]


def _pairs(violations: list[Violation]) -> list[dict[str, str]]:
    return sorted(
        ({"path": v.path, "rule": v.rule} for v in violations),
        key=lambda e: (e["path"], e["rule"]),
    )


def _decode(cls: Any, data: dict[str, Any]) -> Any:
    message, violations = protojson.decode(cls, data)
    assert violations == [], f"vector input does not decode: {violations}"
    return message


CAPS = _vectors("capabilities.json")
REQUESTS = _vectors("requests.json")
ROUTING = _vectors("routing.json")


@pytest.mark.parametrize("vector", CAPS, ids=_ids(CAPS))
def test_capabilities_vector(vector: dict[str, Any]) -> None:
    kind, violations = validate_document(vector["document"])
    assert kind == vector["kind"]
    # a row carries "severity" only for a warning; an error row omits it
    got = sorted(
        (
            {"path": v.path, "rule": v.rule}
            | ({"severity": v.severity} if v.severity != "error" else {})
            for v in violations
        ),
        key=lambda e: (e["path"], e["rule"], e.get("severity", "")),
    )
    assert got == vector["expected"]
    assert all(v.message for v in violations)


@pytest.mark.parametrize("vector", REQUESTS, ids=_ids(REQUESTS))
def test_request_vector(vector: dict[str, Any]) -> None:
    spec = _decode(ModelSpec, vector["spec"])
    request = _decode(StreamCompletionRequest, vector["request"])
    violations = validate_request(request, spec)
    got = sorted(
        ({"path": v.path, "rule": v.rule, "severity": v.severity} for v in violations),
        key=lambda e: (e["path"], e["rule"], e["severity"]),
    )
    assert got == vector["expected"]
    assert vector["valid"] == all(v.severity == "warning" for v in violations)


@pytest.mark.parametrize("vector", ROUTING, ids=_ids(ROUTING))
def test_routing_vector(vector: dict[str, Any]) -> None:
    request = _decode(StreamCompletionRequest, vector["request"])
    candidates = [_decode(ModelTarget, c) for c in vector["candidates"]]
    result = route(request, candidates)
    expected = vector["expected"]
    assert result.index == expected["chosen"]
    if expected["chosen"] is None:
        assert result.target is None
    else:
        assert result.target is candidates[expected["chosen"]]
    got = [{"index": s.index, "violations": _pairs(s.violations)} for s in result.skipped]
    assert got == expected["skipped"]


def test_every_vector_file_is_well_formed() -> None:
    for name in ("capabilities.json", "requests.json", "routing.json"):
        data = json.loads((CONFORMANCE / name).read_text(encoding="utf-8"))
        assert data["format"].startswith("protocol-py.conformance.")
        names = [v["name"] for v in data["vectors"]]
        assert len(names) == len(set(names)), name
        for v in data["vectors"]:
            expected = v["expected"]
            rows = expected if isinstance(expected, list) else []
            assert rows == sorted(rows, key=lambda e: (e["path"], e["rule"], e.get("severity", "")))
