"""``protocol_py.Conversation``: ULID message ids, call_context, replay of the accumulated
assistant message (thinking and signatures), tool results, cache breakpoints, validation
against the ModelSpec; and a multi-turn exchange with a tool call against the built-in
provider, end to end over gRPC."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator

import pytest
from ulid import ULID

from protocol_py import Conversation, ModelClient, ModelServer
from protocol_py.client.conversation import document, image, text, tool
from protocol_py.errors import InvalidValueError, ValidationError
from protocol_py.providers.reference import ReferenceProvider, reference_models
from protocol_py.rules.accumulate import accumulate
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import Message, Role
from protocol_py_gen.model.v1 import (
    GenerationParams,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
)

LARGE, MEDIUM, SMALL = reference_models()
WEATHER = tool(
    "get_weather",
    "Current weather for a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def is_ulid(text: str) -> bool:
    try:
        return str(ULID.from_str(text)) == text
    except ValueError:
        return False


class Recording(ReferenceProvider):
    """The reference provider, keeping every request it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[StreamCompletionRequest] = []

    def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        return super().stream(request, context)


def test_user_turns_get_ulid_ids_and_a_new_turn_id_in_one_session() -> None:
    conv = Conversation(spec=LARGE, working_directory="/work")
    first = conv.user("Hello")
    turn_1 = conv.turn_id
    request = conv.request()
    assert request.model_id == "reference-large"
    assert request.call_context == CallContext(
        session_id=conv.session_id, turn_id=turn_1, working_directory="/work"
    )
    second = conv.user("Again")
    assert conv.turn_id != turn_1
    assert all(is_ulid(x) for x in (first.id, second.id, conv.session_id, conv.turn_id))
    assert first.id != second.id
    assert conv.request().call_context.session_id == request.call_context.session_id


def test_user_parts_hold_text_images_and_documents() -> None:
    spec = LARGE
    conv = Conversation(spec.id)
    message = conv.user(
        "Look:", image(b"\x89PNG", "image/png"), document(b"%PDF", "application/pdf", "a.pdf")
    )
    assert [b.text.text for b in message.content if b.text] == ["Look:"]
    assert message.content[1].image.media_type == "image/png"
    assert message.content[2].document.filename == "a.pdf"
    assert conv.request().messages == [message]  # no spec: only the shape is checked


def test_request_is_validated_against_the_model_spec() -> None:
    conv = Conversation(spec=SMALL, params=GenerationParams(thinking_effort="high"))
    conv.user("hi")
    with pytest.raises(ValidationError) as info:
        conv.request()
    assert [v.path for v in info.value.violations] == ["params.thinking_effort"]
    # an override for this request only
    assert conv.request(params=GenerationParams(max_output_tokens=10)).params is not None
    with pytest.raises(ValidationError, match="tools"):
        conv.request(tools=[WEATHER])  # reference-small has no tool use


def test_an_empty_request_names_the_missing_messages() -> None:
    with pytest.raises(ValidationError, match="messages"):
        Conversation("any-model").request()
    with pytest.raises(InvalidValueError, match="model id or the model's ModelSpec"):
        Conversation()


def test_assistant_replay_keeps_thinking_signatures_and_tool_calls_verbatim() -> None:
    conv = Conversation(spec=LARGE, tools=[WEATHER])
    conv.user("What is the weather in Paris? use tool")
    events = [
        StreamEvent.from_dict(e)
        for e in (
            {"thinkingDelta": {"text": "Let me think."}},
            {"thinkingSignature": {"signature": "c2lnLTE="}},
            {"toolCallStart": {"id": "call_1", "name": "get_weather"}},
            {"toolCallDelta": {"id": "call_1", "argumentsFragment": '{"city": "Paris"}'}},
            {"toolCallDone": {"id": "call_1"}},
            {"stop": {"reason": "STOP_REASON_TOOL_USE"}},
        )
    ]
    result = accumulate(events)
    replayed = conv.assistant(result)
    assert replayed is result.message and is_ulid(replayed.id)
    assert replayed.content[0].thinking.signature == b"sig-1"
    assert [c.name for c in conv.pending_tool_calls()] == ["get_weather"]
    turn = conv.turn_id
    conv.tool_result("call_1", {"temperature_c": 21})
    assert conv.turn_id == turn  # tool results stay in the turn that asked for them
    assert conv.pending_tool_calls() == []
    request = conv.request()
    assert [m.role for m in request.messages] == [Role.USER, Role.ASSISTANT, Role.USER]
    result_block = request.messages[2].content[0].tool_result
    assert result_block.tool_use_id == "call_1"
    assert result_block.content[0].text.text == '{"temperature_c": 21}'


def test_tool_results_of_one_turn_share_one_user_message() -> None:
    conv = Conversation(spec=LARGE, tools=[WEATHER])
    conv.user("two calls")
    events = [
        StreamEvent.from_dict(e)
        for e in (
            {"toolCallStart": {"id": "a", "name": "get_weather"}},
            {"toolCallDone": {"id": "a"}},
            {"toolCallStart": {"id": "b", "name": "get_weather"}},
            {"toolCallDone": {"id": "b"}},
            {"stop": {"reason": "STOP_REASON_TOOL_USE"}},
        )
    ]
    conv.assistant(accumulate(events))
    first = conv.tool_result("a", "sunny")
    second = conv.tool_result("b", "rain", is_error=True)
    assert first is second and len(conv.messages) == 3
    assert [b.tool_result.is_error for b in first.content] == [False, True]
    with pytest.raises(InvalidValueError, match="not a pending tool call") as info:
        conv.tool_result("a", "again")
    assert info.value.rule == "conversation.tool_result.unknown_call"


def test_assistant_refuses_what_cannot_be_replayed() -> None:
    conv = Conversation(spec=LARGE)
    with pytest.raises(InvalidValueError, match="no content blocks"):
        conv.assistant(
            accumulate([StreamEvent.from_dict({"stop": {"reason": "STOP_REASON_END_TURN"}})])
        )
    user = conv.user("hi")
    with pytest.raises(InvalidValueError, match="expected an assistant Message"):
        conv.assistant(user)


def test_cache_breakpoints_are_placed_where_asked() -> None:
    conv = Conversation(spec=LARGE, tools=[WEATHER])
    conv.system("Be brief.")
    conv.cache_after_context()
    conv.cache_after_tools()
    conv.user("one")
    conv.cache_after_message()  # index 0, fixed now
    conv.user("two")
    request = conv.request()
    points = [bp.to_dict() for bp in request.cache_breakpoints]
    assert points == [{"afterAssembledContext": {}}, {"afterTools": {}}, {"afterMessageIndex": "0"}]
    with pytest.raises(InvalidValueError, match="index 5 outside the 2 messages"):
        conv.cache_after_message(5)


async def test_multi_turn_with_a_tool_call_against_the_reference_provider() -> None:
    provider = Recording()
    server = ModelServer(provider)
    port = await server.start("127.0.0.1", 0)
    try:
        async with ModelClient.connect(f"127.0.0.1:{port}") as client:
            caps = await client.get_capabilities(timeout=10)
            spec = next(m for m in caps.models if m.id == "reference-large")
            conv = Conversation(spec=spec, tools=[WEATHER])
            conv.system("Be brief.")
            conv.user("What is the weather in Paris? use tool")
            first = await client.complete(conv.request(), timeout=30)
            assert first.stop is not None and first.stop.reason == StopReason.TOOL_USE
            conv.assistant(first)
            calls = conv.pending_tool_calls()
            assert [c.name for c in calls] == ["get_weather"]
            conv.tool_result(calls[0].id, {"temperature_c": 21})
            second = await client.complete(conv.request(), timeout=30)
            assert second.stop is not None and second.stop.reason == StopReason.END_TURN
            answer = "".join(b.text.text for b in second.message.content if b.text)
            assert '{"temperature_c": 21}' in answer
            conv.assistant(second)
            conv.user("Thanks")
            third = await client.complete(conv.request(), timeout=30)
            assert third.usage is not None and (third.usage.cache_read_tokens or 0) > 0
    finally:
        await server.shutdown(grace_period=0)
    first_req, second_req, third_req = provider.requests
    assert first_req.call_context.turn_id == second_req.call_context.turn_id
    assert third_req.call_context.turn_id != second_req.call_context.turn_id
    assert len({r.call_context.session_id for r in provider.requests}) == 1
    # the provider received the first answer's thinking block with its signature, verbatim
    replayed = second_req.messages[1]
    assert replayed.id == first.message.id and replayed.role == Role.ASSISTANT
    thinking = [b.thinking for b in replayed.content if b.thinking is not None]
    assert thinking and thinking[0].signature.startswith(b"refsig:")
    assert thinking == [b.thinking for b in first.message.content if b.thinking is not None]
    assert [len(r.messages) for r in provider.requests] == [1, 3, 5]


def test_request_shares_the_history_messages_and_a_deepcopy_edits_safely() -> None:
    """``Conversation.request()`` is read-only (documented): new lists, the history's own
    Message objects; editing a ``copy.deepcopy`` of it leaves later turns unchanged."""
    conv = Conversation("m")
    conv.user("first question")
    request = conv.request()
    assert request.messages is not conv.messages
    assert request.messages[0] is conv.messages[0]  # shared, not copied
    request.messages.append(Message(role=Role.USER, id="x", content=[text("appended")]))
    assert len(conv.messages) == 1  # the list itself is the request's own
    edited = copy.deepcopy(request)
    edited.messages[0].content[0].text.text = "edited"  # type: ignore[union-attr]
    conv.user("second question")
    later = conv.request()
    assert [m.content[0].text.text for m in later.messages] == [  # type: ignore[union-attr]
        "first question",
        "second question",
    ]
