"""A kernel's multi-turn tool loop with thinking, through the gRPC server, on Gemini 2.5 and 3,
on the Gemini API and on Vertex AI: every turn's request body carries each signature on the
part it arrived on (turn N's accumulated message -> turn N+1's body, part by part)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from protocol_py.client.client import Completion, ModelClient
from protocol_py.client.conversation import Conversation, tool
from protocol_py.providers.gemini.auth import VertexCredentials
from protocol_py.providers.gemini.provider import GeminiProvider, VertexProvider
from protocol_py_gen.model.v1 import StopReason

from ...support.adapters import served_client
from ._gemini import SYNTHETIC_ID, GeminiStub, response_object, stream_reply
from .test_provider import service_account  # noqa: F401 (the fixture)

USAGE = {
    "promptTokenCount": 40,
    "candidatesTokenCount": 8,
    "thoughtsTokenCount": 5,
    "totalTokenCount": 53,
}


def _chunk(parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
    return response_object(parts, finish, usage=USAGE, response_id="r", modelVersion="v")


def _calls_turn(gemini3: bool) -> list[dict[str, Any]]:
    weather = {"name": "get_weather", "args": {"city": "Paris"}}
    clock = {"name": "get_time", "args": {"tz": "CET"}}
    if gemini3:  # one call per event, vendor ids, the first call signed, an empty last part
        return [
            _chunk([{"text": "Plan: two lookups.", "thought": True}]),
            _chunk([{"functionCall": {**weather, "id": "fc1"}, "thoughtSignature": "SIG/CALL+1="}]),
            _chunk([{"functionCall": {**clock, "id": "fc2"}}]),
            _chunk([{"text": ""}], "STOP"),
        ]
    return [  # 2.5: no ids, both calls in one event, the first signed
        _chunk([{"text": "Plan: two lookups.", "thought": True}]),
        _chunk(
            [{"functionCall": weather, "thoughtSignature": "SIG/CALL+1="}, {"functionCall": clock}],
            "STOP",
        ),
    ]


def _answer_turn(gemini3: bool) -> list[dict[str, Any]]:
    if gemini3:  # the signature on the last, empty part
        return [
            _chunk([{"text": "It is sunny"}]),
            _chunk([{"text": " at 9."}]),
            _chunk([{"text": "", "thoughtSignature": "SIG/END"}], "STOP"),
        ]
    return [  # 2.5: the first text part after the thoughts is signed
        _chunk([{"text": "Thinking done.", "thought": True}]),
        _chunk([{"text": "It is sunny", "thoughtSignature": "SIG/TEXT"}]),
        _chunk([{"text": " at 9."}], "STOP"),
    ]


def _provider(kind: str, stub: GeminiStub, account: dict[str, str]) -> GeminiProvider:
    if kind == "gemini":
        return GeminiProvider(api_key="AIza-round-trip-key-000", base_url=stub.url + "/v1beta")
    credentials = VertexCredentials(info=account, token_uri=stub.url + "/token")
    return VertexProvider(
        location="us-central1", credentials=credentials, base_url=stub.url + "/v1beta1"
    )


async def _turn(client: ModelClient, conv: Conversation, kernel: str) -> Completion:
    """One kernel turn: the conversation's request (as a kernel of ``kernel`` would send it),
    folded and appended to the history."""
    request = dataclasses.replace(conv.request(), kernel_protocol_version=kernel)
    done = await client.complete(request, timeout=20)
    assert done.error is None, done.error
    conv.assistant(done)
    return done


CASES = [
    pytest.param(kind, model, kernel, id=f"{kind}-{model}-kernel{kernel}")
    for kind, model in (
        ("gemini", "gemini-2.5-flash"),
        ("gemini", "gemini-3-pro-preview"),
        ("vertex", "gemini-2.5-pro"),
        ("vertex", "gemini-3-flash-preview"),
    )
    for kernel in ("1.2", "1.1")
]


@pytest.mark.parametrize(("kind", "model", "kernel"), CASES)
async def test_tool_loop_replays_every_signature_on_its_part(
    kind: str,
    model: str,
    kernel: str,
    service_account: dict[str, str],  # noqa: F811
) -> None:
    gemini3 = model.startswith("gemini-3")
    async with GeminiStub() as stub:
        stub.queue(
            stream_reply(*_calls_turn(gemini3)),
            stream_reply(*_answer_turn(gemini3)),
            stream_reply(_chunk([{"text": "Bye."}], "STOP")),
        )
        provider = _provider(kind, stub, service_account)
        async for client in served_client(provider):
            assert (await client.describe(timeout=10)).name == kind  # names the producer
            spec = await client.model_spec(model)
            assert spec is not None
            conv = Conversation(
                spec=spec,
                tools=[
                    tool("get_weather", "weather", {"type": "object"}),
                    tool("get_time", "time", {"type": "object"}),
                ],
            )
            conv.system("You are terse.")

            conv.user("Weather and time in Paris?")
            first = await _turn(client, conv, kernel)
            assert first.stop is not None and first.stop.reason == StopReason.TOOL_USE
            calls = conv.pending_tool_calls()
            assert [c.name for c in calls] == ["get_weather", "get_time"]
            if gemini3:
                assert [c.id for c in calls] == ["fc1", "fc2"]
            else:
                assert all(SYNTHETIC_ID.fullmatch(c.id) for c in calls)
            conv.tool_result(calls[0].id, "sunny")
            conv.tool_result(calls[1].id, "09:00")
            second = await _turn(client, conv, kernel)
            assert second.stop is not None and second.stop.reason == StopReason.END_TURN
            assert first.cost is not None and second.cost is not None
            conv.user("Thanks")
            await _turn(client, conv, kernel)
        await provider.aclose()
    bodies = [s.json() for s in stub.streams()]
    assert len(bodies) == 3
    assert all(b["systemInstruction"] == {"parts": [{"text": "You are terse."}]} for b in bodies)
    ids = ({"id": "fc1"}, {"id": "fc2"}) if gemini3 else ({}, {})
    model_calls = {
        "role": "model",
        "parts": [
            {
                "functionCall": {"name": "get_weather", "args": {"city": "Paris"}, **ids[0]},
                "thoughtSignature": "SIG/CALL+1=",
            },
            {"functionCall": {"name": "get_time", "args": {"tz": "CET"}, **ids[1]}},
        ],
    }
    results = {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    **ids[0],
                    "name": "get_weather",
                    "response": {"output": "sunny"},
                }
            },
            {"functionResponse": {**ids[1], "name": "get_time", "response": {"output": "09:00"}}},
        ],
    }
    question = {"role": "user", "parts": [{"text": "Weather and time in Paris?"}]}
    assert bodies[0]["contents"] == [question]
    assert bodies[1]["contents"] == [question, model_calls, results]
    if gemini3 and kernel == "1.2":  # the empty signed part stays a part of its own
        answer = [{"text": "It is sunny at 9."}, {"text": "", "thoughtSignature": "SIG/END"}]
    elif gemini3:  # protocol 1.1 cannot say which part was signed: it goes on the text part
        answer = [{"text": "It is sunny at 9.", "thoughtSignature": "SIG/END"}]
    else:
        answer = [{"text": "It is sunny at 9.", "thoughtSignature": "SIG/TEXT"}]
    assert bodies[2]["contents"] == [
        question,
        model_calls,
        results,
        {"role": "model", "parts": answer},
        {"role": "user", "parts": [{"text": "Thanks"}]},
    ]
