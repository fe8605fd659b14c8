"""The reference model's reasoning text counts the prompt's words in correct English: "1 word",
"2 words", on both the effort and the budget path."""

from __future__ import annotations

import pytest

from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.rules.accumulate import accumulate
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import GenerationParams, StreamCompletionRequest


async def thinking_text(model: str, prompt: str) -> str:
    provider = ReferenceProvider()
    request = StreamCompletionRequest(
        model_id=model,
        messages=[
            Message(id="01A", role=Role.USER, content=[ContentBlock(text=TextBlock(text=prompt))])
        ],
        call_context=CallContext(session_id="s", turn_id="t"),
        # reference-medium reasons only when given a budget (it declares no default)
        params=GenerationParams(thinking_budget_tokens=2000)
        if model == "reference-medium"
        else None,
    )
    assert request.call_context is not None
    events = [e async for e in provider.stream(request, request.call_context)]
    result = accumulate(events)
    thinking = [b.thinking for b in result.message.content if b.thinking is not None]
    assert len(thinking) == 1
    return thinking[0].text


@pytest.mark.parametrize("model", ["reference-large", "reference-medium"])
@pytest.mark.parametrize(
    ("prompt", "phrase"),
    [("Hello", "The user wrote 1 word;"), ("Hello there", "The user wrote 2 words;")],
)
async def test_reasoning_text_pluralises_the_word_count(
    model: str, prompt: str, phrase: str
) -> None:
    text = await thinking_text(model, prompt)
    assert text.startswith(phrase), text
    assert "1 words" not in text
