"""Secret-looking Configure key names and ``base_url`` path segments are redacted like values
(docs/security.md, "What is never logged"): never in a status, an in-band event or a log line,
and the server keeps serving."""

from __future__ import annotations

from protocol_py.codec.structs import to_struct
from protocol_py_gen.model.v1 import ConfigureRequest, StreamEvent

from .conftest import Captured, Served, acall, request, still_serving

KEY_NAME = "sk-ant-api03-Zq8fKx2LmN4pR7tV9wY1"
HEX_NAME = "9b2e7deaec5f07e2759100dbccc0ab5c14aa33f2"
PATH_SECRET = "sk-proj-Ab3dEf6hIj9kLm2nOp5q"


async def test_unknown_secret_looking_key_names_are_not_echoed(
    served: Served, logs: Captured
) -> None:
    config = {KEY_NAME: "x", HEX_NAME: 1, "max_tokens_typo": 3}
    result = await acall(
        served.address, "Configure", bytes(ConfigureRequest(config=to_struct(config)))
    )
    assert result.code == "INVALID_ARGUMENT", result
    assert result.details is not None
    assert KEY_NAME not in result.details and HEX_NAME not in result.details
    # the ordinary name is still named, the two secret-looking ones as <redacted>
    assert "/max_tokens_typo: unknown property" in result.details
    assert result.details.count("/<redacted>: unknown property") == 2, result.details
    for record in logs.records:
        text = record.getMessage()
        assert KEY_NAME not in text and HEX_NAME not in text, text[:300]
    (configure,) = [r for r in logs.rpc_records() if r["rpc"] == "Configure"]
    assert sorted(configure["config_keys"]) == ["<redacted>", "<redacted>", "max_tokens_typo"]
    await still_serving(served)


async def test_base_url_path_segment_that_looks_like_a_key_is_redacted_in_stream_metadata(
    served: Served, logs: Captured
) -> None:
    url = f"https://gw.example.com/v1/keys/{PATH_SECRET}/openai?api-version=2024-10-21"
    result = await acall(
        served.address,
        "Configure",
        bytes(ConfigureRequest(config=to_struct({"base_url": url}))),
    )
    assert result.code == "OK", result
    streamed = await acall(served.address, "StreamCompletion", bytes(request()), stream=True)
    assert streamed.code == "OK", streamed
    events = [StreamEvent.parse(r) for r in streamed.replies]
    (meta,) = [e.metadata for e in events if e.metadata is not None and e.metadata.attrs]
    assert meta.attrs["base_url"] == "https://gw.example.com/v1/keys/***/openai?api-version=***"
    for record in logs.records:
        assert PATH_SECRET not in record.getMessage()
    await still_serving(served)
