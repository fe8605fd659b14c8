"""Content blocks the model's capabilities refuse (``request.content.<kind>_unsupported``) and
image and document blocks without a media type: each violation's path, rule, text and
severity, for every block kind."""

from __future__ import annotations

from protocol_py.rules.request import validate_request
from protocol_py_gen.content.v1 import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.model.v1 import ThinkingSpec

from .test_validation import make_request, make_spec

ASSISTANT = Message(
    id="01A",
    role=Role.ASSISTANT,
    content=[
        ContentBlock(thinking=ThinkingBlock(text="hmm")),
        ContentBlock(redacted_thinking=RedactedThinkingBlock(data=b"x")),
        ContentBlock(tool_use=ToolUseBlock(id="call-1", name="look")),
    ],
)
USER = Message(
    id="01B",
    role=Role.USER,
    content=[
        ContentBlock(image=ImageBlock(data=b"\x89PNG")),
        ContentBlock(document=DocumentBlock(data=b"%PDF")),
        ContentBlock(
            tool_result=ToolResultBlock(
                tool_use_id="call-1", content=[ContentBlock(text=TextBlock(text="ok"))]
            )
        ),
    ],
)


def _found(**spec: object) -> list[tuple[str, str, str, str]]:
    request = make_request(
        messages=[
            Message(id="01U", role=Role.USER, content=[ContentBlock(text=TextBlock(text="hi"))]),
            ASSISTANT,
            USER,
        ]
    )
    return [
        (v.path, v.rule, v.message, v.severity)
        for v in validate_request(request, make_spec(**spec))
    ]


def test_every_refused_block_kind_and_missing_media_type_is_named_in_its_own_words() -> None:
    found = _found(
        supports_tool_use=False,
        supports_vision=False,
        supports_documents=False,
        thinking=ThinkingSpec(supported=False),
    )
    assert found == [
        (
            "messages[1].content[0].thinking",
            "request.content.thinking_unsupported",
            "model 'm1' does not reason (thinking.supported=false); a thinking block is not "
            "relevant to it and an adapter will not send it",
            "warning",
        ),
        (
            "messages[1].content[1].redacted_thinking",
            "request.content.redacted_thinking_unsupported",
            "model 'm1' does not reason (thinking.supported=false); a redacted_thinking block "
            "is not relevant to it and an adapter will not send it",
            "warning",
        ),
        (
            "messages[1].content[2].tool_use",
            "request.content.tool_use_unsupported",
            "model 'm1' does not accept tool_use blocks (supports_tool_use=false)",
            "error",
        ),
        (
            "messages[2].content[0].image",
            "request.content.image_unsupported",
            "model 'm1' does not accept image blocks (supports_vision=false)",
            "error",
        ),
        (
            "messages[2].content[0].image.media_type",
            "request.content.media_type_empty",
            "an image block MUST carry its media type",
            "error",
        ),
        (
            "messages[2].content[1].document",
            "request.content.document_unsupported",
            "model 'm1' does not accept document blocks (supports_documents=false)",
            "error",
        ),
        (
            "messages[2].content[1].document.media_type",
            "request.content.media_type_empty",
            "a document block MUST carry its media type",
            "error",
        ),
        (
            "messages[2].content[2].tool_result",
            "request.content.tool_result_unsupported",
            "model 'm1' does not accept tool_result blocks (supports_tool_use=false)",
            "error",
        ),
    ]


def test_a_capable_model_refuses_no_block_and_still_wants_media_types() -> None:
    found = _found(supports_vision=True, supports_documents=True)
    assert [(path, rule) for path, rule, _, _ in found] == [
        ("messages[2].content[0].image.media_type", "request.content.media_type_empty"),
        ("messages[2].content[1].document.media_type", "request.content.media_type_empty"),
    ]
