"""Per-message validation reused across turns (:mod:`protocol_py.rules.request_memo`).

A request the server just decoded cleanly keeps each message's wire image; a message whose
exact image passed every message-local rule under the same model settings is not walked again.
Every test compares against the full walk (a request built in Python, which never uses the
memo): a hit reports exactly the violations a miss does.
"""

from __future__ import annotations

from typing import Any

import pytest

from protocol_py.codec import wire
from protocol_py.codec.prefixes import ConversationPrefixes
from protocol_py.errors import Violation
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py.rules import request as request_rules
from protocol_py.rules.request import validate_request, validate_request_shape
from protocol_py.rules.request_memo import (
    MAX_IMAGE_BYTES,
    MAX_PREFIX_BYTES,
    MAX_PREFIXES,
    CleanMessage,
    ValidatedMessages,
    ValidState,
    take_request_images,
    valid_prefixes,
)
from protocol_py.server.grpc_layer import limits
from protocol_py.server.reflection import build_descriptor_pool
from protocol_py_gen.content.v1 import ContentBlock, ImageBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import ModelSpec, StreamCompletionRequest

from ..server.test_turn_path import MODEL, conversation


@pytest.fixture(scope="module")
def strict() -> Any:
    return limits.strict_request_classes(build_descriptor_pool())[StreamCompletionRequest]


@pytest.fixture
def prefixes(monkeypatch: pytest.MonkeyPatch) -> ConversationPrefixes[ValidState]:
    fresh = valid_prefixes()
    monkeypatch.setattr(request_rules, "PREFIXES", fresh)
    return fresh


@pytest.fixture
def memo(
    monkeypatch: pytest.MonkeyPatch, prefixes: ConversationPrefixes[ValidState]
) -> ValidatedMessages:
    fresh = ValidatedMessages()
    monkeypatch.setattr(request_rules, "VALIDATED", fresh)
    return fresh


@pytest.fixture(scope="module")
def spec() -> ModelSpec:
    found = OpenAIProvider(api_key="k", base_url="http://127.0.0.1:9").spec_for(MODEL)
    assert found is not None
    return found


def decoded(request: StreamCompletionRequest, strict: Any) -> StreamCompletionRequest:
    """``request`` as the server has it: decoded from the wire, marked clean, images kept."""
    return limits.decode_request(wire.encode(request), StreamCompletionRequest, strict)


def full_walk(request: StreamCompletionRequest, spec: ModelSpec | None) -> list[Violation]:
    """The violations of a request built in Python (no images: the memo is never used)."""
    plain = StreamCompletionRequest.parse(wire.encode(request))
    if spec is None:
        return validate_request_shape(plain)
    return validate_request(plain, spec)


def test_turns_resume_after_the_unchanged_messages_and_report_nothing(
    strict: Any,
    memo: ValidatedMessages,
    prefixes: ConversationPrefixes[ValidState],
    spec: ModelSpec,
) -> None:
    for pairs in (1, 2, 3):
        assert validate_request(decoded(conversation(pairs), strict), spec) == []
    # turn 1: 3 messages walked; turns 2 and 3: the previous list is resumed, 2 new each
    assert (prefixes.hits, prefixes.misses) == (2, 1)
    assert (memo.hits, memo.misses) == (0, 7)
    assert len(memo) == 7 and len(prefixes) == 1
    # the same conversation resent (a retry): nothing walked
    assert validate_request(decoded(conversation(3), strict), spec) == []
    assert (prefixes.hits, memo.misses) == (3, 7)
    # an edited earlier message: no resuming; the unchanged messages still hit one by one
    edited = conversation(3)
    edited.messages[3].content[0].text = TextBlock(text="edited")
    assert validate_request(decoded(edited, strict), spec) == []
    assert prefixes.misses == 2
    assert (memo.hits, memo.misses) == (6, 8)


def test_the_same_messages_under_new_ids_resume_the_list_and_the_id_rules_still_run(
    strict: Any,
    memo: ValidatedMessages,
    prefixes: ConversationPrefixes[ValidState],
    spec: ModelSpec,
) -> None:
    """The last valid list is found by content (the decode's content keys), so new ids
    resume it whole; the id rules run over the resumed messages as a full walk's would."""
    assert validate_request(decoded(conversation(3), strict), spec) == []
    misses = memo.misses
    renamed = conversation(3)
    for i, message in enumerate(renamed.messages):
        message.id = f"01JNEW{i:020d}"
    assert validate_request(decoded(renamed, strict), spec) == []
    assert (prefixes.hits, memo.hits, memo.misses) == (1, 0, misses)
    # new ids that collide or are missing are reported exactly as by a full walk
    renamed.messages[2].id = renamed.messages[0].id
    renamed.messages[4].id = ""
    found = validate_request(decoded(renamed, strict), spec)
    assert found == full_walk(renamed, spec)
    assert {v.rule for v in found} == {
        "request.message.id_duplicate",
        "request.message.id_missing",
    }
    assert memo.misses == misses  # the contents were still known


@pytest.mark.parametrize(
    ("ids", "rules"),
    [
        ({2: 0}, {"request.message.id_duplicate"}),
        ({4: None}, {"request.message.id_missing"}),
        ({1: None, 3: None}, {"request.message.id_missing"}),
        ({5: 1, 6: 1}, {"request.message.id_duplicate"}),
    ],
)
def test_each_id_rule_alone_under_a_resumed_list_reports_as_a_full_walk(
    strict: Any,
    prefixes: ConversationPrefixes[ValidState],
    spec: ModelSpec,
    ids: dict[int, int | None],
    rules: set[str],
) -> None:
    """A resumed list whose ids are all present and unique is checked at once; one missing
    or repeated id anywhere in it is reported exactly as the walk message by message does."""
    assert validate_request(decoded(conversation(3), strict), spec) == []
    renamed = conversation(3)
    for i, message in enumerate(renamed.messages):
        message.id = f"01JNEW{i:020d}"
    for index, source in ids.items():
        renamed.messages[index].id = "" if source is None else renamed.messages[source].id
    found = validate_request(decoded(renamed, strict), spec)
    assert prefixes.hits == 1
    assert found == full_walk(renamed, spec)
    assert {v.rule for v in found} == rules


def test_a_resumed_list_still_checks_the_new_messages_against_it(
    strict: Any,
    memo: ValidatedMessages,
    prefixes: ConversationPrefixes[ValidState],
    spec: ModelSpec,
) -> None:
    validate_request(decoded(conversation(2), strict), spec)
    # the next turn repeats an id and a tool_use id of the kept list, and answers a call
    # nobody made: all three found although the first 5 messages are not walked
    bad = conversation(2)
    again = Message().from_dict(bad.messages[3].to_dict())
    again.content[1].tool_use.id = "c1"  # type: ignore[union-attr]
    bad.messages.append(again)
    stray = Message().from_dict(bad.messages[4].to_dict())
    stray.id = "u9"
    stray.content[0].tool_result.tool_use_id = "nobody"  # type: ignore[union-attr]
    bad.messages.append(stray)
    got = validate_request(decoded(bad, strict), spec)
    assert prefixes.hits == 1
    assert [v.rule for v in got] == [
        "request.message.id_duplicate",
        "request.content.tool_use_id_duplicate",
        "request.content.tool_result_unknown_id",
    ]
    assert got == full_walk(bad, spec)
    assert len(prefixes) == 1  # a list with violations is never kept


def test_kept_lists_stay_within_their_bounds() -> None:
    by_count: ConversationPrefixes[str] = ConversationPrefixes(max_entries=2, max_bytes=100)
    for key in ("a", "b", "c"):
        by_count.put(key, (b"i",), key)
    assert len(by_count) == 2
    assert by_count.match("a", [b"i"]) is None
    assert by_count.match("c", [b"i", b"more"]) == ((b"i",), "c")
    assert by_count.match("c", [b"j"]) is None  # other bytes: no match
    assert by_count.match("c", []) is None  # shorter than the kept list: no match
    by_bytes: ConversationPrefixes[str] = ConversationPrefixes(max_entries=10, max_bytes=10)
    by_bytes.put("a", (b"x" * 6,), "a")
    by_bytes.put("b", (b"y" * 4,), "b", value_bytes=2)
    assert len(by_bytes) == 1 and by_bytes.size_bytes == 6
    by_bytes.put("c", (b"z" * 11,), "c")  # larger than the whole bound: not kept
    assert len(by_bytes) == 1 and by_bytes.match("b", [b"y" * 4]) == ((b"y" * 4,), "b")
    assert valid_prefixes().max_entries == MAX_PREFIXES
    assert valid_prefixes().max_bytes == MAX_PREFIX_BYTES


def test_a_changed_message_with_the_same_id_misses_and_its_violation_is_reported(
    strict: Any, memo: ValidatedMessages, spec: ModelSpec
) -> None:
    validate_request(decoded(conversation(2), strict), spec)
    changed = conversation(2)
    changed.messages[1].content.append(ContentBlock())  # same id "a1", now a block unset
    misses = memo.misses
    got = validate_request(decoded(changed, strict), spec)
    assert memo.misses == misses + 1
    assert [v.rule for v in got] == ["request.content.block_unset"]
    assert got == full_walk(changed, spec)
    assert got[0].path == "messages[1].content[2]"


def test_a_hit_still_checks_the_rules_that_span_messages(
    strict: Any, memo: ValidatedMessages, spec: ModelSpec
) -> None:
    validate_request(decoded(conversation(3), strict), spec)
    # the tool_result of messages[2] now answers a call that is no longer earlier in the list
    dropped = conversation(3)
    del dropped.messages[1]
    got = validate_request(decoded(dropped, strict), spec)
    assert [v.rule for v in got] == ["request.content.tool_result_unknown_id"]
    assert got == full_walk(dropped, spec)
    # the same assistant message twice: one id duplicated, and its tool_use id duplicated
    doubled = conversation(2)
    doubled.messages.insert(2, doubled.messages[1])
    got = validate_request(decoded(doubled, strict), spec)
    assert [v.rule for v in got] == [
        "request.message.id_duplicate",
        "request.content.tool_use_id_duplicate",
    ]
    assert got == full_walk(doubled, spec)
    assert got[1].message == "tool_use id 'c1' is already used at messages[1].content[1].tool_use"


def test_a_message_valid_for_one_model_is_checked_again_for_another(
    strict: Any, memo: ValidatedMessages, spec: ModelSpec
) -> None:
    request = conversation(1)
    request.messages.append(
        Message(
            role=Role.USER,
            id="img",
            content=[ContentBlock(image=ImageBlock(media_type="image/png", data=b"\x89PNG"))],
        )
    )
    vision = ModelSpec().from_dict(spec.to_dict())
    vision.supports_vision = True
    blind = ModelSpec().from_dict(spec.to_dict())
    blind.supports_vision = False
    assert validate_request(decoded(request, strict), vision) == []
    got = validate_request(decoded(request, strict), blind)
    assert [v.rule for v in got] == ["request.content.image_unsupported"]
    assert got == full_walk(request, blind)
    # and the model-independent rules (no spec) are a setting of their own
    assert validate_request_shape(decoded(request, strict)) == full_walk(request, None) == []


def test_warnings_are_never_remembered(
    strict: Any, memo: ValidatedMessages, spec: ModelSpec
) -> None:
    no_reasoning = ModelSpec().from_dict(spec.to_dict())
    no_reasoning.thinking = None
    request = conversation(1)
    request.messages[1].content.insert(
        0, ContentBlock(text=TextBlock(text="plain"))
    )  # still valid; now add a thinking block, a warning for a model that does not reason
    request.messages[1].content.insert(0, ContentBlock.from_dict({"thinking": {"text": "hm"}}))
    first = validate_request(decoded(request, strict), no_reasoning)
    second = validate_request(decoded(request, strict), no_reasoning)
    assert [v.severity for v in first] == ["warning"]
    assert first == second == full_walk(request, no_reasoning)


def test_only_a_clean_request_from_the_wire_uses_the_memo(
    strict: Any, memo: ValidatedMessages, spec: ModelSpec
) -> None:
    validate_request(conversation(2), spec)  # built in Python: nothing kept, nothing read
    assert (memo.hits, memo.misses, len(memo)) == (0, 0, 0)
    request = decoded(conversation(2), strict)
    assert take_request_images(request) is not None
    assert take_request_images(request) is None  # once
    request = decoded(conversation(2), strict)
    request.messages.pop()  # the list changed since decoding: the images no longer apply
    assert take_request_images(request) is None


def user(text: str, message_id: str) -> Message:
    return Message(role=Role.USER, id=message_id, content=[ContentBlock(text=TextBlock(text=text))])


def test_bounds_evict_the_least_recently_used_and_content_is_the_key() -> None:
    entry = CleanMessage(uses=((0, "c"),), answers=())
    images = {name: bytes(user(name * 3, f"id-{name}")) for name in "abc"}
    by_count = ValidatedMessages(max_entries=2)
    for image in images.values():
        by_count.put("s", image, entry)
    assert len(by_count) == 2
    assert by_count.get("s", images["a"]) is None  # the least recently used went
    assert by_count.get("s", images["c"]) == entry
    assert by_count.get("s", bytes(user("ccc", "another-id"))) == entry  # same content, new id
    assert by_count.get("s", bytes(user("ccd", "id-c"))) is None  # same id, other content
    assert by_count.get("other settings", images["c"]) is None
    by_bytes = ValidatedMessages(max_bytes=10)
    by_bytes.put("s", b"x" * 6, entry)  # does not scan: the image itself is the key
    by_bytes.get("s", b"x" * 6)
    by_bytes.put("s", b"y" * 6, entry)  # 12 bytes: the oldest goes
    assert len(by_bytes) == 1 and by_bytes.size_bytes == 6
    assert by_bytes.get("s", b"y" * 6) == entry
    sized = ValidatedMessages()
    sized.put("s", images["a"], entry)
    assert sized.size_bytes == len(wire.content_key(images["a"])) < len(images["a"])
    large = ValidatedMessages()
    large.put("s", b"z" * (MAX_IMAGE_BYTES + 1), entry)
    assert len(large) == 0


def test_the_decodes_content_keys_serve_the_memo_without_a_scan_of_its_own(
    strict: Any,
    memo: ValidatedMessages,
    spec: ModelSpec,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request the server's decode memo decoded carries each message's content key: the
    memo looks them up (a new id each turn still hits) and computes none of its own."""
    scans: list[bytes] = []
    content_key = wire.content_key

    def counting(image: bytes) -> bytes:
        scans.append(image)
        return content_key(image)

    first = decoded(conversation(3), strict)
    monkeypatch.setattr(wire, "content_key", counting)
    assert validate_request(first, spec) == []
    renamed = conversation(3)
    for i, message in enumerate(renamed.messages):
        message.id = f"01JKEYS{i:019d}"
    renamed.messages[3].content[0].text = TextBlock(text="a changed message")
    assert validate_request(decoded(renamed, strict), spec) == full_walk(renamed, spec) == []
    assert scans == []
    assert (memo.hits, memo.misses) == (len(renamed.messages) - 1, len(renamed.messages) + 1)
    # a request whose images carry no keys still computes them
    plain = StreamCompletionRequest.parse(wire.encode(renamed))
    images = [wire.encode(m) for m in plain.messages]
    assert memo.get(request_rules.settings_of(spec), images[0]) is not None
    assert len(scans) == 1
