"""Protocol 1.1 through the server with the built-in reference provider: signed tool calls
(per-call vendor data carried and required back) and paused turns (PAUSE_TURN and its replay
rule)."""

from __future__ import annotations

import pytest

from protocol_py.client.client import ModelClient
from protocol_py.client.conversation import Conversation
from protocol_py.errors import InvalidValueError
from protocol_py.providers.anthropic.request import build_anthropic_body
from protocol_py.providers.reference import SIGNATURE_LOCATION
from protocol_py.rules.replay import continue_paused_turn, is_paused
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    VendorData,
)
from protocol_py_gen.model.v1 import (
    ErrorKind,
    GenerationParams,
    ModelSpec,
    Stop,
    StopReason,
    ThinkingReplay,
    ThinkingSpec,
)

from ...support.servers import make_request, user
from .test_provider import WEATHER

FULL_ANSWER_END = "nothing was sent over the network."


def text_of(message: Message) -> str:
    return "".join(b.text.text for b in message.content if b.text is not None)


async def test_signed_tool_call_carries_vendor_data_on_start_and_block(
    client: ModelClient,
) -> None:
    events = [e async for e in client.stream(make_request("signed tool: weather", tools=[WEATHER]))]
    (start,) = [e.tool_call_start for e in events if e.tool_call_start is not None]
    assert start.id.startswith("toolu_refsig_")
    (entry,) = start.vendor_data
    assert entry.location == SIGNATURE_LOCATION == "reference.tool_call.signature"
    assert entry.value.startswith(b"refcall:") and len(entry.value) == len(b"refcall:") + 32
    done = await client.complete(make_request("signed tool: weather", tools=[WEATHER]))
    assert done.stop is not None and done.stop.reason == StopReason.TOOL_USE
    blocks = [b.tool_use for b in done.message.content if b.tool_use is not None]
    assert [list(b.vendor_data) for b in blocks] == [[entry]]


async def _history(client: ModelClient, keep_vendor_data: bool) -> list[Message]:
    first = await client.complete(make_request("signed tool: weather", tools=[WEATHER]))
    assistant = first.message
    call = next(b.tool_use for b in assistant.content if b.tool_use is not None)
    if not keep_vendor_data:
        call.vendor_data = []
    result = Message(
        role=Role.USER,
        id="01J00000000000000000000003",
        content=[
            ContentBlock(
                tool_result=ToolResultBlock(
                    tool_use_id=call.id, content=[ContentBlock(text=TextBlock(text="sunny"))]
                )
            )
        ],
    )
    return [user("signed tool: weather"), assistant, result]


async def test_signed_call_replayed_with_its_vendor_data_is_answered(client: ModelClient) -> None:
    messages = await _history(client, keep_vendor_data=True)
    done = await client.complete(make_request(tools=[WEATHER], messages=messages))
    assert done.error is None
    assert done.stop is not None and done.stop.reason == StopReason.END_TURN
    assert "The tool returned: sunny" in text_of(done.message)


async def test_signed_call_replayed_without_vendor_data_is_refused_like_gemini(
    client: ModelClient,
) -> None:
    messages = await _history(client, keep_vendor_data=False)
    done = await client.complete(make_request(tools=[WEATHER], messages=messages))
    assert done.error is not None and done.error.kind == ErrorKind.INVALID_REQUEST
    j = next(j for j, b in enumerate(messages[1].content) if b.tool_use is not None)
    assert j == 2  # after the thinking and text blocks of reference-large
    assert done.error.message.startswith(f"messages[1].content[{j}].tool_use.vendor_data: ")
    assert SIGNATURE_LOCATION in done.error.message
    # The server keeps serving.
    again = await client.complete(make_request("Hello there"))
    assert again.stop is not None and again.stop.reason == StopReason.END_TURN


async def test_invalid_vendor_data_is_refused_with_its_rule_id_and_server_keeps_serving(
    client: ModelClient,
) -> None:
    messages = await _history(client, keep_vendor_data=True)
    call = next(b.tool_use for b in messages[1].content if b.tool_use is not None)
    call.vendor_data.append(VendorData(location="Bad/Loc" * 40, value=b"x"))
    done = await client.complete(make_request(tools=[WEATHER], messages=messages))
    assert done.error is not None and done.error.kind == ErrorKind.INVALID_REQUEST
    assert "request.content.tool_use.vendor_data.location_invalid" in done.error.message
    assert "messages[1].content[2].tool_use.vendor_data[1]" in done.error.message
    assert "Bad/Loc" * 10 not in done.error.message  # the bad location is quoted bounded
    again = await client.complete(make_request("Hello there"))
    assert again.stop is not None and again.stop.reason == StopReason.END_TURN


async def test_paused_turn_stops_with_pause_turn_and_continues_when_sent_back(
    client: ModelClient,
) -> None:
    request = make_request("Please pause turn now")
    paused = await client.complete(request)
    assert paused.stop == Stop(
        reason=StopReason.PAUSE_TURN, model_affirmed=True, vendor_reason="pause_turn"
    )
    assert is_paused(paused.stop)
    first_part = text_of(paused.message)
    assert first_part.startswith("This is reference-large, the offline reference model.")
    assert FULL_ANSWER_END not in first_part
    continued_request = continue_paused_turn(request, paused.message, paused.stop)
    assert len(request.messages) == 1  # the original request is untouched
    assert [m.role for m in continued_request.messages] == [Role.USER, Role.ASSISTANT]
    assert continued_request.messages[-1] == paused.message  # sent back as is
    rest = await client.complete(continued_request)
    assert rest.error is None
    assert rest.stop is not None and rest.stop.reason == StopReason.END_TURN
    assert not any(b.thinking is not None for b in rest.message.content)
    whole = first_part + text_of(rest.message)
    assert whole == (
        "This is reference-large, the offline reference model. You wrote: Please pause turn now"
        " Here is a deterministic answer: every word above was counted, and nothing was sent "
        "over the network."
    )


def test_continue_paused_turn_refuses_a_turn_that_did_not_pause() -> None:
    message = Message(role=Role.ASSISTANT, content=[ContentBlock(text=TextBlock(text="x"))])
    with pytest.raises(InvalidValueError) as info:
        continue_paused_turn(make_request(), message, Stop(reason=StopReason.END_TURN))
    assert info.value.rule == "replay.not_paused"
    with pytest.raises(InvalidValueError) as info:
        continue_paused_turn(
            make_request(), Message(role=Role.USER), Stop(reason=StopReason.PAUSE_TURN)
        )
    assert info.value.rule == "replay.paused_message"


def test_anthropic_body_sends_the_paused_message_back_as_the_last_message() -> None:
    """The replay rule on the Anthropic wire: the paused assistant content goes last, as is
    (thinking with its signature, then text), so Anthropic continues the turn."""
    paused = Message(
        role=Role.ASSISTANT,
        id="01J00000000000000000000002",
        produced_by_provider="anthropic",
        content=[
            ContentBlock(thinking=ThinkingBlock(text="Let me search.", signature=b"SIG_T1==")),
            ContentBlock(text=TextBlock(text="Searching the web")),
        ],
    )
    request = continue_paused_turn(
        make_request("Find it", model="claude-x"),
        paused,
        Stop(reason=StopReason.PAUSE_TURN, model_affirmed=True, vendor_reason="pause_turn"),
    )
    request.params = GenerationParams(thinking_budget_tokens=2048)  # the paused turn thought
    spec = ModelSpec(
        id="claude-x",
        context_window=200_000,
        max_output_tokens=8_000,
        thinking=ThinkingSpec(supported=True, replay=ThinkingReplay.ALL),
    )
    body = build_anthropic_body(request, spec)
    assert body["messages"][-1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Let me search.", "signature": "SIG_T1=="},
            {"type": "text", "text": "Searching the web"},
        ],
    }
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]


async def test_conversation_keeps_vendor_data_and_continues_a_paused_turn(
    client: ModelClient,
) -> None:
    """protocol_py.client.conversation needs nothing new: the accumulated message (vendor data
    included) is replayed as is, and a paused message appended last continues the turn."""
    conversation = Conversation("reference-large", tools=[WEATHER])
    conversation.user("signed tool: weather")
    first = await client.complete(conversation.request())
    conversation.assistant(first)
    (call,) = conversation.pending_tool_calls()
    assert [v.location for v in call.vendor_data] == [SIGNATURE_LOCATION]
    conversation.tool_result(call.id, "sunny")
    answered = await client.complete(conversation.request())
    assert answered.error is None and "The tool returned: sunny" in text_of(answered.message)
    conversation.assistant(answered)

    conversation.user("Now pause turn please")
    paused = await client.complete(conversation.request())
    assert is_paused(paused.stop)
    conversation.assistant(paused)
    rest = await client.complete(conversation.request())
    assert rest.stop is not None and rest.stop.reason == StopReason.END_TURN
    assert (text_of(paused.message) + text_of(rest.message)).endswith(FULL_ANSWER_END)
