"""StreamCompletionRequest -> Gemini body, rule by rule (docs/adapters.md "Gemini")."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from protocol_py.codec.structs import to_struct
from protocol_py.errors import InvalidValueError
from protocol_py.providers.gemini.models import gemini_models
from protocol_py.providers.gemini.parts import (
    FUNCTION_CALL_ID,
    SKIP_SIGNATURE,
    THOUGHT_SIGNATURE,
    signature_family,
)
from protocol_py.providers.gemini.request import (
    GeminiOptions,
    build_gemini_body,
    build_gemini_count_body,
)
from protocol_py.providers.http.request import dump_body
from protocol_py_gen.content.v1 import (
    ContentBlock,
    ContextSection,
    DocumentBlock,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    VendorData,
)
from protocol_py_gen.model.v1 import (
    GenerationParams,
    ToolChoice,
    ToolChoiceMode,
    ToolDeclaration,
)

from ._gemini import completion, user

SPECS = {s.id: s for s in gemini_models()}


def _body(model: str, *messages: Message, **fields: Any) -> dict[str, Any]:
    return build_gemini_body(completion(model, *messages, **fields), SPECS[model])


def _vd(location: str, value: str) -> VendorData:
    return VendorData(location=location, value=value.encode())


def _call(call_id: str, name: str, *vendor: VendorData, **args: Any) -> ContentBlock:
    return ContentBlock(
        tool_use=ToolUseBlock(
            id=call_id, name=name, input=to_struct(args), vendor_data=list(vendor)
        )
    )


def _result(call_id: str, text: str, *, error: bool = False) -> ContentBlock:
    return ContentBlock(
        tool_result=ToolResultBlock(
            tool_use_id=call_id,
            content=[ContentBlock(text=TextBlock(text=text))],
            is_error=error,
        )
    )


def _model(*blocks: ContentBlock, provider: str = "gemini", model: str | None = None) -> Message:
    return Message(
        role=Role.ASSISTANT,
        id="a1",
        content=list(blocks),
        produced_by_provider=provider,
        produced_by_model_id=model,
    )


def _text(text: str, *vendor: VendorData) -> ContentBlock:
    return ContentBlock(text=TextBlock(text=text, vendor_data=list(vendor)))


def test_key_order_puts_contents_last_and_system_parts_in_chain_order() -> None:
    body = _body(
        "gemini-2.5-flash",
        user("hi"),
        assembled_context=[
            ContextSection(provider="p", content=[ContentBlock(text=TextBlock(text="one"))]),
            ContextSection(provider="q", content=[ContentBlock(text=TextBlock(text="two"))]),
        ],
        tools=[
            ToolDeclaration(
                name="get_x", description="d", input_schema=to_struct({"type": "object"})
            )
        ],
        params=GenerationParams(max_output_tokens=100, temperature=0.5),
    )
    assert list(body) == ["systemInstruction", "tools", "generationConfig", "contents"]
    assert body["systemInstruction"] == {"parts": [{"text": "one"}, {"text": "two"}]}
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {"name": "get_x", "description": "d", "parametersJsonSchema": {"type": "object"}}
            ]
        }
    ]
    assert body["generationConfig"] == {
        "maxOutputTokens": 100,
        "temperature": 0.5,
        "thinkingConfig": {"includeThoughts": True},
    }
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


def test_signatures_go_back_on_the_parts_they_came_from() -> None:
    answer = _model(
        ContentBlock(thinking=ThinkingBlock(text="summary", signature=b"")),  # unsigned: dropped
        _text("The answer", _vd(THOUGHT_SIGNATURE, "TXT+SIG/==")),
        _call(
            "8hd01vsf",
            "add",
            _vd(THOUGHT_SIGNATURE, "CALL+SIG"),
            _vd(FUNCTION_CALL_ID, "8hd01vsf"),
            a=2,
        ),
        _call("gemini_01ABC", "add", b=3),
        _text("", _vd(THOUGHT_SIGNATURE, "LAST")),
        model="gemini-3-pro-preview",
    )
    tool_turn = Message(
        role=Role.USER,
        id="u2",
        content=[_result("8hd01vsf", "5"), _result("gemini_01ABC", "boom", error=True)],
    )
    body = _body("gemini-3-pro-preview", user("go"), answer, tool_turn)
    assert body["contents"][1] == {
        "role": "model",
        "parts": [
            {"text": "The answer", "thoughtSignature": "TXT+SIG/=="},
            {
                "functionCall": {"name": "add", "args": {"a": 2}, "id": "8hd01vsf"},
                "thoughtSignature": "CALL+SIG",
            },
            {"functionCall": {"name": "add", "args": {"b": 3}}},  # synthetic id never sent
            {"text": "", "thoughtSignature": "LAST"},
        ],
    }
    assert body["contents"][2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"id": "8hd01vsf", "name": "add", "response": {"output": "5"}}},
            {"functionResponse": {"name": "add", "response": {"error": "boom"}}},
        ],
    }


def test_the_1_1_text_signature_form_goes_back_onto_its_text_part() -> None:
    answer = _model(
        _text("Hello"),
        ContentBlock(thinking=ThinkingBlock(text="", signature=b"SIG-A")),
        _call("c1", "f"),
        ContentBlock(thinking=ThinkingBlock(text="", signature=b"SIG-B")),
        ContentBlock(thinking=ThinkingBlock(text="thought", signature=b"SIG-C")),
        model="gemini-2.5-pro",
    )
    parts = _body("gemini-2.5-pro", user("q"), answer)["contents"][1]["parts"]
    assert parts == [
        {"text": "Hello", "thoughtSignature": "SIG-A"},
        {"functionCall": {"name": "f", "args": {}}},
        {"text": "", "thoughtSignature": "SIG-B"},
        {"text": "thought", "thought": True, "thoughtSignature": "SIG-C"},
    ]


@pytest.mark.parametrize(
    ("provider", "made_by"),
    [("anthropic", None), ("gemini", "gemini-2.5-pro"), (None, "gemini-2.5-flash")],
)
def test_signatures_are_not_replayed_to_another_model_family(
    provider: str | None, made_by: str | None
) -> None:
    answer = Message(
        role=Role.ASSISTANT,
        id="a1",
        produced_by_provider=provider,
        produced_by_model_id=made_by,
        content=[
            ContentBlock(thinking=ThinkingBlock(text="t", signature=b"S")),
            _text("x", _vd(THOUGHT_SIGNATURE, "S2")),
            _call("c1", "f", _vd(THOUGHT_SIGNATURE, "S3")),
        ],
    )
    parts = _body("gemini-3-flash-preview", user("q"), answer)["contents"][1]["parts"]
    # Gemini 3 refuses an unsigned first call of a step: Google's stand-in is sent instead
    assert parts == [
        {"text": "x"},
        {"functionCall": {"name": "f", "args": {}}, "thoughtSignature": SKIP_SIGNATURE},
    ]


def test_same_family_keeps_signatures_and_3_pro_answered_by_3_1_is_one_family() -> None:
    assert signature_family("gemini-3-pro-preview") == signature_family("gemini-3.1-pro-preview")
    assert signature_family("gemini-2.5-flash") != signature_family("gemini-2.5-flash-lite")
    assert signature_family("gemini-2.5-pro") != signature_family("gemini-3-pro-preview")
    answer = _model(_call("c1", "f", _vd(THOUGHT_SIGNATURE, "S3")), model="gemini-3.1-pro-preview")
    parts = _body("gemini-3-pro-preview", user("q"), answer)["contents"][1]["parts"]
    assert parts == [{"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "S3"}]


def test_unsigned_calls_on_gemini_2_5_get_no_stand_in() -> None:
    answer = _model(_call("c1", "f"), _call("c2", "g"), model="gemini-2.5-flash")
    parts = _body("gemini-2.5-flash", user("q"), answer)["contents"][1]["parts"]
    assert parts == [
        {"functionCall": {"name": "f", "args": {}}},
        {"functionCall": {"name": "g", "args": {}}},
    ]


def test_one_content_per_message_never_merged_and_empty_turns_dropped() -> None:
    body = _body(
        "gemini-2.5-flash",
        user("a", "u1"),
        user("b", "u2"),
        _model(ContentBlock(thinking=ThinkingBlock(text="unsigned"))),
        user("c", "u3"),
    )
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "a"}]},
        {"role": "user", "parts": [{"text": "b"}]},
        {"role": "user", "parts": [{"text": "c"}]},
    ]


def test_media_and_documents() -> None:
    png = b"\x89PNG\r\n"
    pdf = b"%PDF-1.7"
    message = Message(
        role=Role.USER,
        id="u1",
        content=[
            ContentBlock(image=ImageBlock(data=png, media_type="image/png")),
            ContentBlock(document=DocumentBlock(data=pdf, media_type="application/pdf")),
            ContentBlock(document=DocumentBlock(data="héllo".encode(), media_type="text/plain")),
            ContentBlock(document=DocumentBlock(data=b"RIFF", media_type="audio/wav")),
        ],
    )
    parts = _body("gemini-2.5-flash", message)["contents"][0]["parts"]
    assert parts == [
        {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(png).decode()}},
        {"inlineData": {"mimeType": "application/pdf", "data": base64.b64encode(pdf).decode()}},
        {"text": "héllo"},
        {"inlineData": {"mimeType": "audio/wav", "data": base64.b64encode(b"RIFF").decode()}},
    ]
    bad = Message(
        role=Role.USER,
        id="u1",
        content=[ContentBlock(document=DocumentBlock(data=b"x", media_type="application/zip"))],
    )
    with pytest.raises(InvalidValueError) as info:
        _body("gemini-2.5-flash", bad)
    assert info.value.rule == "adapter.gemini.document.media_type"
    assert info.value.path == "messages[0].content[0].document.media_type"


def test_tool_result_media_goes_in_the_response_on_gemini_3_and_beside_it_on_2_5() -> None:
    image = ContentBlock(image=ImageBlock(data=b"img", media_type="image/jpeg"))
    result = ContentBlock(
        tool_result=ToolResultBlock(
            tool_use_id="c1", content=[ContentBlock(text=TextBlock(text="see")), image]
        )
    )
    inline = {"inlineData": {"mimeType": "image/jpeg", "data": base64.b64encode(b"img").decode()}}
    for model, expected in (
        (
            "gemini-3-pro-preview",
            [{"functionResponse": {"name": "f", "response": {"output": "see"}, "parts": [inline]}}],
        ),
        (
            "gemini-2.5-pro",
            [{"functionResponse": {"name": "f", "response": {"output": "see"}}}, inline],
        ),
    ):
        answer = _model(_call("c1", "f", _vd(THOUGHT_SIGNATURE, "S")), model=model)
        turn = Message(role=Role.USER, id="u2", content=[result])
        assert _body(model, user("q"), answer, turn)["contents"][2]["parts"] == expected


def test_tool_result_for_an_unknown_call_is_refused() -> None:
    turn = Message(role=Role.USER, id="u2", content=[_result("nope", "x")])
    with pytest.raises(InvalidValueError) as info:
        _body("gemini-2.5-flash", user("q"), turn)
    assert info.value.rule == "adapter.gemini.tool_result.unknown_call"


@pytest.mark.parametrize("name", ["1abc", "has space", "ok/slash", "x" * 129, ""])
def test_function_names_gemini_refuses_are_refused(name: str) -> None:
    with pytest.raises(InvalidValueError) as info:
        _body("gemini-2.5-flash", user("q"), tools=[ToolDeclaration(name=name)])
    assert (info.value.rule, info.value.path) == ("adapter.gemini.tool.name", "tools[0].name")


def test_function_names_gemini_accepts() -> None:
    for name in ("_x", "a.b:c-d_9", "n" * 128):
        _body("gemini-2.5-flash", user("q"), tools=[ToolDeclaration(name=name)])


@pytest.mark.parametrize(
    ("name", "ok"), [("a.b-c_9", True), ("n" * 64, True), ("a:b", False), ("n" * 65, False)]
)
def test_vertex_function_names_are_at_most_64_characters_without_colons(
    name: str, ok: bool
) -> None:
    request = completion("gemini-2.5-flash", user("q"), tools=[ToolDeclaration(name=name)])
    vertex = GeminiOptions(provider="vertex")
    if ok:
        body = build_gemini_body(request, SPECS["gemini-2.5-flash"], vertex)
        assert body["tools"] == [{"functionDeclarations": [{"name": name}]}]
        return
    with pytest.raises(InvalidValueError) as info:
        build_gemini_body(request, SPECS["gemini-2.5-flash"], vertex)
    assert (info.value.rule, info.value.path) == ("adapter.gemini.tool.name", "tools[0].name")
    assert "at most 64 characters on Vertex AI" in str(info.value)
    build_gemini_body(request, SPECS["gemini-2.5-flash"])  # the Gemini API takes it


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (ToolChoiceMode.AUTO, {"mode": "AUTO"}),
        (ToolChoiceMode.ANY, {"mode": "ANY"}),
        (ToolChoiceMode.NONE, {"mode": "NONE"}),
        (ToolChoiceMode.SPECIFIC, {"mode": "ANY", "allowedFunctionNames": ["f"]}),
    ],
)
def test_tool_choice_modes(mode: ToolChoiceMode, expected: dict[str, Any]) -> None:
    choice = ToolChoice(mode=mode, tool_name="f" if mode == ToolChoiceMode.SPECIFIC else None)
    body = _body(
        "gemini-2.5-flash",
        user("q"),
        tools=[ToolDeclaration(name="f")],
        params=GenerationParams(tool_choice=choice),
    )
    assert body["toolConfig"] == {"functionCallingConfig": expected}


@pytest.mark.parametrize(
    ("model", "params", "thinking"),
    [
        (
            "gemini-3-pro-preview",
            GenerationParams(thinking_effort="low"),
            {"includeThoughts": True, "thinkingLevel": "LOW"},
        ),
        (
            "gemini-3-pro-preview",
            GenerationParams(thinking_effort="medium"),
            {"includeThoughts": True, "thinkingLevel": "HIGH"},
        ),  # collapsed onto low/high
        (
            "gemini-3-flash-preview",
            GenerationParams(thinking_effort="minimal"),
            {"includeThoughts": True, "thinkingLevel": "MINIMAL"},
        ),
        (
            "gemini-2.5-pro",
            GenerationParams(thinking_budget_tokens=2048),
            {"includeThoughts": True, "thinkingBudget": 2048},
        ),
        (
            "gemini-2.5-flash",
            GenerationParams(disable_thinking=True),
            {"includeThoughts": True, "thinkingBudget": 0},
        ),
        (
            "gemini-2.5-flash-lite",
            GenerationParams(disable_thinking=False),
            {"includeThoughts": True, "thinkingBudget": -1},
        ),
        ("gemini-2.5-flash", GenerationParams(), {"includeThoughts": True}),
    ],
)
def test_thinking_level_or_budget_never_both(
    model: str, params: GenerationParams, thinking: dict[str, Any]
) -> None:
    body = _body(model, user("q"), params=params)
    assert body["generationConfig"]["thinkingConfig"] == thinking


def test_include_thoughts_can_be_turned_off() -> None:
    request = completion("gemini-2.5-flash", user("q"))
    body = build_gemini_body(
        request, SPECS["gemini-2.5-flash"], GeminiOptions(include_thoughts=False)
    )
    assert "generationConfig" not in body


def test_stop_sequences_are_not_sent_to_the_vendor() -> None:
    body = _body("gemini-2.5-flash", user("q"), params=GenerationParams(stop_sequences=["END"]))
    assert "stopSequences" not in json.dumps(body)


def test_provider_options_merge_and_reserved_keys() -> None:
    options = to_struct(
        {
            "safetySettings": [{"category": "X", "threshold": "BLOCK_NONE"}],
            "generationConfig": {"topK": 3, "responseMimeType": "application/json"},
        }
    )
    body = _body(
        "gemini-2.5-flash",
        user("q"),
        provider_options=options,
        params=GenerationParams(max_output_tokens=9),
    )
    assert body["safetySettings"] == [{"category": "X", "threshold": "BLOCK_NONE"}]
    assert body["generationConfig"] == {
        "maxOutputTokens": 9,
        "thinkingConfig": {"includeThoughts": True},
        "topK": 3,
        "responseMimeType": "application/json",
    }
    assert list(body)[-1] == "contents"
    for bad, field in (
        ({"tools": []}, "provider_options.tools"),
        ({"cachedContent": "x"}, "provider_options.cachedContent"),
        (
            {"generationConfig": {"thinkingConfig": {}}},
            "provider_options.generationConfig.thinkingConfig",
        ),
    ):
        with pytest.raises(InvalidValueError) as info:
            _body("gemini-2.5-flash", user("q"), provider_options=to_struct(bad))
        assert (info.value.rule, info.value.path) == ("adapter.provider_options.reserved", field)


def test_body_of_turn_n_is_a_prefix_of_turn_n_plus_1() -> None:
    answer = _model(
        _text("a", _vd(THOUGHT_SIGNATURE, "S")), _call("c1", "f"), model="gemini-3-pro-preview"
    )
    turn1 = dump_body(_body("gemini-3-pro-preview", user("q"), answer))
    turn2 = dump_body(
        _body(
            "gemini-3-pro-preview",
            user("q"),
            answer,
            Message(role=Role.USER, id="u2", content=[_result("c1", "ok")]),
        )
    )
    assert turn2.startswith(turn1[:-2])  # up to the end of the last content of turn 1


def test_count_body_forms_count_system_and_tools() -> None:
    request = completion(
        "gemini-2.5-flash",
        user("q"),
        tools=[ToolDeclaration(name="f")],
        assembled_context=[
            ContextSection(provider="p", content=[ContentBlock(text=TextBlock(text="s"))])
        ],
    )
    spec = SPECS["gemini-2.5-flash"]
    api = build_gemini_count_body(request, spec, vertex=False)
    assert api == {
        "generateContentRequest": {
            "model": "models/gemini-2.5-flash",
            "contents": [{"role": "user", "parts": [{"text": "q"}]}],
            "systemInstruction": {"parts": [{"text": "s"}]},
            "tools": [{"functionDeclarations": [{"name": "f"}]}],
        }
    }
    assert build_gemini_count_body(request, spec, vertex=True) == {
        k: v for k, v in api["generateContentRequest"].items() if k != "model"
    }
