"""Codec benchmark: betterproto2 stubs against google's upb classes, in one run.

Two payloads, each encoded and decoded by both implementations:

* a ``text_delta`` StreamEvent (the hot path of a stream);
* a StreamCompletionRequest with ``--messages`` messages (default 50) of realistic content:
  user text, assistant thinking with a signature, text and a tool call with Struct input,
  and the tool result.

The upb classes are compiled from ``proto/`` into a temporary directory with
``grpc_tools.protoc`` (as the tests do). Before timing, both sides are checked to produce the
same bytes. The three implementations of an operation are timed in alternation, ``--repeat``
rounds of about 0.05 s each (a busy machine's load then falls on all three alike); each time
column is the median over the rounds, and the ratio columns (betterproto2 / upb and
:mod:`protocol_py.codec.wire`, the codec the server and client use, / upb) the median of the
ratios within each round. A third payload is the conversation of
``benchmarks/turn_latency.py`` (``--turn-messages`` after the first, default 600: 1.1 MB).

Usage: ``.venv/bin/python benchmarks/codec.py [--messages 50] [--turn-messages 600] [--repeat 7]``
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc_tools
from grpc_tools import protoc
from turn_latency import conversation

from protocol_py.codec import wire
from protocol_py.codec.structs import to_struct
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.model.v1 import (
    GenerationParams,
    StreamCompletionRequest,
    StreamEvent,
    TextDelta,
    ToolDeclaration,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "proto"


def compile_upb(out_dir: Path) -> Any:
    """Compile proto/ to upb classes in ``out_dir``; return the model.v1 types module."""
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    sources = sorted(p.relative_to(PROTO_ROOT).as_posix() for p in PROTO_ROOT.rglob("*.proto"))
    args = ["protoc", f"-I{PROTO_ROOT}", f"-I{well_known}", f"--python_out={out_dir}", *sources]
    if protoc.main(args) != 0:
        raise RuntimeError(f"grpc_tools.protoc failed: {' '.join(args)}")
    sys.path.insert(0, str(out_dir))
    try:
        return importlib.import_module("model.v1.types_pb2")
    finally:
        sys.path.remove(str(out_dir))


def text_delta_event() -> StreamEvent:
    return StreamEvent(text_delta=TextDelta(text="Hello, world! This is a streamed token."))


def completion_request(messages: int) -> StreamCompletionRequest:
    """A request of ``messages`` messages cycling user text, assistant turn, tool result."""
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File to read."},
            "limit": {"type": "integer", "minimum": 1},
        },
        "required": ["path"],
    }
    history: list[Message] = []
    for i in range(messages):
        kind = i % 3
        if kind == 0:
            history.append(
                Message(
                    role=Role.USER,
                    id=f"01JDQ{i:021d}",
                    content=[
                        ContentBlock(
                            text=TextBlock(
                                text=f"Step {i}: please read the config and summarise the "
                                "settings that affect caching, retries and timeouts."
                            )
                        )
                    ],
                )
            )
        elif kind == 1:
            history.append(
                Message(
                    role=Role.ASSISTANT,
                    id=f"01JDQ{i:021d}",
                    produced_by_model_id="claude-opus-5",
                    produced_by_provider="anthropic",
                    content=[
                        ContentBlock(
                            thinking=ThinkingBlock(
                                text="The user wants the caching settings; read the file "
                                "first, then summarise.",
                                signature=bytes(range(256))[:160],
                            )
                        ),
                        ContentBlock(text=TextBlock(text="I'll read the file.")),
                        ContentBlock(
                            tool_use=ToolUseBlock(
                                id=f"toolu_{i:04d}",
                                name="read_file",
                                input=to_struct({"path": f"conf/app-{i}.toml", "limit": 200}),
                            )
                        ),
                    ],
                )
            )
        else:
            history.append(
                Message(
                    role=Role.USER,
                    id=f"01JDQ{i:021d}",
                    content=[
                        ContentBlock(
                            tool_result=ToolResultBlock(
                                tool_use_id=f"toolu_{i - 1:04d}",
                                content=[
                                    ContentBlock(
                                        text=TextBlock(
                                            text="[cache]\nttl = 300\n[retry]\nmax = 3\n"
                                            "backoff = 0.5\n[http]\ntimeout = 30\n"
                                        )
                                    )
                                ],
                            )
                        )
                    ],
                )
            )
    return StreamCompletionRequest(
        messages=history,
        model_id="claude-opus-5",
        tools=[
            ToolDeclaration(
                name="read_file", description="Read a file.", input_schema=to_struct(schema)
            )
        ],
        params=GenerationParams(max_output_tokens=4096, thinking_effort="high"),
    )


ROUND_SECONDS = 0.05
"""About how long each implementation is timed in each round, seconds."""


def interleaved(funcs: Sequence[Callable[[], object]], rounds: int) -> list[list[float]]:
    """Seconds per call of each of ``funcs`` in each of ``rounds`` rounds.

    A round times every function in turn for about :data:`ROUND_SECONDS` (a loop count sized
    once, beforehand, with ``timeit``'s autorange), so a change of the machine's load during the
    run falls on all of them alike and a ratio taken within a round compares like with like.
    """
    numbers = []
    for func in funcs:
        count, took = timeit.Timer(func).autorange()
        numbers.append(max(1, round(count * ROUND_SECONDS / took)) if took > 0 else count)
    times: list[list[float]] = [[] for _ in funcs]
    for _ in range(rounds):
        for func, number, runs in zip(funcs, numbers, times, strict=True):
            runs.append(timeit.Timer(func).timeit(number) / number)
    return times


Row = tuple[str, float, float, float, float, float]
"""Label; median seconds of betterproto2, wire and upb; medians of the per-round ratios
betterproto2 / upb and wire / upb."""


def row(label: str, funcs: Sequence[Callable[[], object]], rounds: int) -> Row:
    """One table row: ``funcs`` are betterproto2's, wire's and upb's operation."""
    bp2, ours, upb = interleaved(funcs, rounds)
    return (
        label,
        statistics.median(bp2),
        statistics.median(ours),
        statistics.median(upb),
        statistics.median(b / u for b, u in zip(bp2, upb, strict=True)),
        statistics.median(w / u for w, u in zip(ours, upb, strict=True)),
    )


def bench_payload(name: str, ours: Any, upb_cls: Any, repeat: int) -> list[Row]:
    """Time encode and decode of one payload with betterproto2, protocol_py.codec.wire and upb,
    in ``repeat`` interleaved rounds (:func:`interleaved`).

    Raises:
        AssertionError: the two implementations disagree on the payload (checked first; Struct
            map entries may be ordered differently, so sizes and decoded values are compared).
    """
    data = bytes(ours)
    theirs = upb_cls.FromString(data)
    upb_data = theirs.SerializeToString()
    if len(upb_data) != len(data) or type(ours).parse(upb_data) != ours:
        raise AssertionError(f"{name}: betterproto2 and upb disagree")
    if type(ours).parse(data) != ours:
        raise AssertionError(f"{name}: betterproto2 round trip differs")
    cls = type(ours)
    if wire.decode(cls, data) != ours or wire.encode(ours) != data:
        raise AssertionError(f"{name}: protocol_py.codec.wire differs from betterproto2")
    return [
        row(
            f"{name} encode",
            (lambda: bytes(ours), lambda: wire.encode(ours), theirs.SerializeToString),
            repeat,
        ),
        row(
            f"{name} decode",
            (
                lambda: cls.parse(data),
                lambda: wire.decode(cls, data),
                lambda: upb_cls.FromString(data),
            ),
            repeat,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="betterproto2 vs upb codec benchmark")
    parser.add_argument("--messages", type=int, default=50, help="messages in the request")
    parser.add_argument(
        "--repeat", type=int, default=7, help="interleaved rounds per measurement (median)"
    )
    parser.add_argument(
        "--turn-messages",
        type=int,
        default=600,
        help="messages after the first of benchmarks/turn_latency.py's conversation",
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="protocol-py-upb-") as out:
        upb = compile_upb(Path(out))
        event = text_delta_event()
        request = completion_request(args.messages)
        rows = bench_payload("text_delta event", event, upb.StreamEvent, args.repeat)
        rows += bench_payload(
            f"request ({args.messages} msgs)", request, upb.StreamCompletionRequest, args.repeat
        )
        turn = conversation(args.turn_messages)
        rows += bench_payload(
            f"turn ({args.turn_messages + 1} msgs)", turn, upb.StreamCompletionRequest, args.repeat
        )

    print(
        f"python {sys.version.split()[0]}; median of {args.repeat} interleaved rounds per "
        f"measurement; load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores at the end"
    )
    print(f"text_delta event: {len(bytes(event))} bytes; request: {len(bytes(request))} bytes")
    print(
        f"{'operation':<34}{'betterproto2':>14}{'wire':>12}{'upb':>12}"
        f"{'bp2/upb':>9}{'wire/upb':>10}"
    )
    for label, ours_s, wire_s, upb_s, ours_ratio, wire_ratio in rows:
        print(
            f"{label:<34}{ours_s * 1e6:>12.1f}us{wire_s * 1e6:>10.1f}us{upb_s * 1e6:>10.1f}us"
            f"{ours_ratio:>8.1f}x{wire_ratio:>9.1f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
