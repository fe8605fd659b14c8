"""``protocol-py chat``: one answer, or an interactive multi-turn session, from a running server.

The prompt comes from the command line, from stdin (``-``) or from a file (``@FILE``), at most
:data:`MAX_PROMPT_BYTES`. Without a prompt, chat reads one user turn per line from stdin (a
terminal or a pipe) until end of input or ``/exit``, keeping the history in a
:class:`~protocol_py.client.conversation.Conversation`: each assistant message, thinking blocks and
their signatures included, is replayed on the next turn. When the model calls tools, the next
line(s) answer the calls, one line per call, in order. A turn the model pauses (protocol 1.1
STOP_REASON_PAUSE_TURN) is continued automatically: the paused assistant message stays in the
history and goes back unmodified as the last message of the next request (:data:`PAUSE_MARKER`
on stderr), at most :data:`MAX_PAUSE_CONTINUATIONS` times in a row.

Output: thinking dim (``[thinking]`` prefix), answer text, tool calls in brackets, then one
line ``tokens: ...; cost: ... USD; stop: ...`` on stdout. An in-band error ends the answer and
is reported on stderr as ``protocol-py chat: <KIND>: <message>``. SIGINT (Ctrl-C) during a
stream cancels the RPC, ends the partial line with a newline and says it was cancelled (exit
130; in a session, the turn is dropped and the session goes on).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import queue
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, BinaryIO, Final, TextIO

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from protocol_py.cli.options import (
    DEFAULT_SERVER,
    SERVER_HELP,
    CliError,
    Parser,
    add_client_options,
    deadline_seconds,
    non_negative_float,
    positive_int,
    run_client,
)
from protocol_py.client.client import ModelClient
from protocol_py.client.conversation import Conversation
from protocol_py.codec import protojson
from protocol_py.errors import ProtocolError, ValidationError, describe_json_error
from protocol_py.rules.accumulate import AccumulatedResponse, StreamAccumulator
from protocol_py.rules.cost import cost
from protocol_py.rules.replay import is_paused
from protocol_py_gen.model.v1 import (
    GenerationParams,
    ModelSpec,
    StreamEvent,
    ToolDeclaration,
)

__all__ = [
    "CAPABILITIES_TIMEOUT",
    "EXIT_CANCELLED",
    "MAX_PAUSE_CONTINUATIONS",
    "MAX_PROMPT_BYTES",
    "MAX_TOOLS_FILE_BYTES",
    "PAUSE_MARKER",
    "ChatError",
    "ChatOptions",
    "add_chat_parser",
    "chat_interactive",
    "chat_once",
    "cmd_chat",
    "load_tools",
    "read_prompt",
]

MAX_PROMPT_BYTES: Final = 16 * 1024 * 1024
"""Largest prompt read from ``-`` (stdin) or ``@FILE``, bytes (16 MiB; the server's default
message limit is 64 MiB)."""

MAX_TOOLS_FILE_BYTES: Final = 4 * 1024 * 1024
"""Largest ``--tools`` file, bytes (4 MiB)."""

MAX_LINE_BYTES: Final = 1024 * 1024
"""Longest line of an interactive session, bytes (1 MiB); a longer line is refused."""

EXIT_CANCELLED: Final = 130
"""Exit status after SIGINT (128 + signal 2, the shell convention)."""

CAPABILITIES_TIMEOUT: Final = 10.0
"""Deadline of chat's first call, GetCapabilities, seconds (``--timeout`` when shorter): a
listener that accepts but never answers (not even the HTTP/2 preface) fails within it."""

TURN_DROPPED: Final = "the turn was dropped; the session goes on"
"""Said on stderr after a failed turn of an interactive session (in-band error, deadline,
Ctrl-C): the turn is left out of the history and the next line starts a new one."""

MAX_PAUSE_CONTINUATIONS: Final = 8
"""Most paused turns (protocol 1.1 STOP_REASON_PAUSE_TURN) ``chat`` continues in a row within
one user turn, requests; a turn still paused after that many continuations fails (it is
incomplete) and is dropped from an interactive session's history."""

PAUSE_MARKER: Final = "[paused by the model; continuing]"
"""Said on stderr each time ``chat`` continues a paused turn."""

EXIT_COMMANDS: Final = ("/exit", "/quit")
"""Lines that end an interactive session (besides end of input)."""


class ChatError(ProtocolError):
    """A chat failure reported as one line ``protocol-py chat: <message>``; ``status`` is the
    exit status (1 failure, 2 bad usage, 130 cancelled)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ChatOptions:
    """What ``chat``'s flags ask for.

    Attributes:
        model: Model id, or None for the first served model.
        system: System text (one assembled-context section), or None.
        timeout: Deadline of each call, seconds.
        params: Generation parameters, or None for the model's defaults.
        tools: Tool declarations (``--tools``).
    """

    model: str | None = None
    system: str | None = None
    timeout: float = 120.0
    params: GenerationParams | None = None
    tools: list[ToolDeclaration] = field(default_factory=list)


def _read_bounded(handle: BinaryIO, what: str, limit: int) -> bytes:
    data = handle.read(limit + 1)
    if len(data) > limit:
        raise ChatError(f"{what}: longer than {limit} bytes")
    return data


def _decode(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ChatError(f"{what}: not UTF-8 (byte {exc.start})") from None


def read_prompt(arg: str | None, stdin: BinaryIO) -> str | None:
    """The prompt: ``arg`` itself, all of ``stdin`` for ``-`` (one trailing newline dropped),
    a file's text for ``@FILE``
    (``@@text`` is the literal ``@text``), or None (no argument: interactive session).

    Raises:
        ChatError: an unreadable file, more than :data:`MAX_PROMPT_BYTES`, not UTF-8, or empty
            (status 1, as every bad input file); an empty PROMPT argument (status 2, bad
            usage).
    """
    if arg is None:
        return None
    if arg == "-":
        prompt = _decode(_read_bounded(stdin, "stdin", MAX_PROMPT_BYTES), "stdin")
        prompt = prompt.removesuffix("\n").removesuffix("\r")  # echo's trailing newline
        what = "stdin"
    elif arg.startswith("@@"):
        prompt, what = arg[1:], "PROMPT"
    elif arg.startswith("@"):
        path = arg[1:]
        try:
            with open(path, "rb") as handle:
                data = _read_bounded(handle, path, MAX_PROMPT_BYTES)
        except OSError as exc:
            raise ChatError(f"{path}: cannot read: {exc.strerror or exc}") from None
        prompt, what = _decode(data, path), path
    else:
        prompt, what = arg, "PROMPT"
    if not prompt.strip():  # an empty argument is bad usage; an empty input, bad input
        raise ChatError(f"{what}: empty prompt", 2 if what == "PROMPT" else 1)
    return prompt


def load_tools(path: str) -> list[ToolDeclaration]:
    """``--tools FILE.json``: a JSON array of proto3-JSON ToolDeclarations (``name``,
    ``description``, ``inputSchema``), or an object with such an array under ``tools``.

    Raises:
        ChatError: unreadable, larger than :data:`MAX_TOOLS_FILE_BYTES`, not JSON (line and
            column named), or a declaration that does not decode (field path named); status 1, as
            every bad input file.
    """
    try:
        with open(path, "rb") as handle:
            raw = _read_bounded(handle, f"--tools {path}", MAX_TOOLS_FILE_BYTES)
    except OSError as exc:
        raise ChatError(f"--tools {path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ChatError(f"--tools {path}: not valid JSON: {describe_json_error(exc)}") from None
    except UnicodeDecodeError as exc:
        raise ChatError(f"--tools {path}: not UTF-8 (byte {exc.start})") from None
    items = data.get("tools") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ChatError(
            f'--tools {path}: expected a JSON array of tool declarations (or {{"tools": [...]}})'
        )
    tools: list[ToolDeclaration] = []
    problems: list[str] = []
    for i, item in enumerate(items):
        decoded, violations = protojson.decode(ToolDeclaration, item)
        problems.extend(
            f"[{i}]{'.' if v.path else ''}{v.path}: {v.rule}: {v.message}" for v in violations
        )
        if decoded is not None:
            tools.append(decoded)
    if problems:
        raise ChatError(f"--tools {path}: " + "; ".join(problems[:20]))
    return tools


def _style(stream: TextIO, code: str, text: str) -> str:
    if stream.isatty() and not os.environ.get("NO_COLOR"):
        return f"\x1b[{code}m{text}\x1b[0m"
    return text


def show_event(out: TextIO, event: StreamEvent, mode: str) -> str:
    """Print one event; returns the new display mode (``thinking``, ``text``, ``tool``; ``""``
    before the first event, when a tool call is printed without a new line before it)."""
    if event.thinking_delta is not None:
        if mode != "thinking":
            out.write(_style(out, "2", "[thinking] "))
            mode = "thinking"
        out.write(_style(out, "2", event.thinking_delta.text))
    elif event.text_delta is not None:
        if mode == "thinking":
            out.write("\n")
        mode = "text"
        out.write(event.text_delta.text)
    elif event.tool_call_start is not None:
        # a new line only after something printed: a call opening the answer starts it
        start = "\n" if mode else ""
        out.write(_style(out, "36", f"{start}[tool call {event.tool_call_start.name}("))
        mode = "tool"
    elif event.tool_call_delta is not None:
        out.write(_style(out, "36", event.tool_call_delta.arguments_fragment))
    elif event.tool_call_done is not None:
        out.write(_style(out, "36", ")]"))
    out.flush()
    return mode


def summary_line(result: AccumulatedResponse, spec: ModelSpec, received_at: datetime | None) -> str:
    """``tokens: input N (cache read R, cache write W), output M (reasoning X); cost: C USD;
    stop: REASON`` (parts without data are left out; empty when there is none)."""
    summary = []
    usage = result.usage
    if usage is not None:
        cached = ""
        if usage.cache_read_tokens or usage.cache_write_tokens:
            cached = (
                f" (cache read {usage.cache_read_tokens or 0},"
                f" cache write {usage.cache_write_tokens or 0})"
            )
        reasoning = f" (reasoning {usage.reasoning_tokens})" if usage.reasoning_tokens else ""
        summary.append(
            f"tokens: input {usage.input_tokens}{cached}, output {usage.output_tokens}{reasoning}"
        )
        if spec.pricing is not None:
            breakdown = cost(spec.pricing, usage, received_at or datetime.now(UTC))
            summary.append(f"cost: {breakdown.total_usd()} USD")
    if result.stop is not None:
        reason = result.stop.reason.name.lower()
        if result.stop.matched_stop_sequence is not None:
            reason += f" {result.stop.matched_stop_sequence!r}"
        summary.append(f"stop: {reason}")
    return "; ".join(summary)


class _CancelledError(Exception):
    """SIGINT arrived during a stream."""


@dataclass
class _Turn:
    result: AccumulatedResponse
    received_at: datetime | None


async def _stream_turn(
    client: ModelClient,
    conv: Conversation,
    out: TextIO,
    timeout: float,  # noqa: ASYNC109 - the RPC deadline, passed to grpclib
) -> _Turn:
    """Stream one request, printing it; SIGINT cancels only this stream (raises _CancelledError)."""
    try:
        request = conv.request()
    except ValidationError as exc:
        lines = "; ".join(str(v) for v in exc.violations)
        raise ChatError(f"invalid request: {lines}", 2) from None
    accumulator = StreamAccumulator(produced_by_model_id=conv.model_id)
    state: dict[str, Any] = {"mode": "", "events": 0, "received_at": None, "text": 0, "thinking": 0}

    async def consume() -> None:
        async for event in client.stream(request, timeout=timeout):
            state["events"] += 1
            state["mode"] = show_event(out, event, state["mode"])
            if event.text_delta is not None:
                state["text"] += len(event.text_delta.text)
            elif event.thinking_delta is not None:
                state["thinking"] += len(event.thinking_delta.text)
            if event.usage is not None:
                state["received_at"] = datetime.now(UTC)
            accumulator.feed(event)

    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(consume())
    interrupted = False

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()

    handled = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT)
    if handled:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        await task
    except asyncio.CancelledError:
        if not interrupted:
            raise
        _end_line(out, state["mode"])
        raise _CancelledError from None
    except (TimeoutError, GRPCError) as exc:
        if isinstance(exc, GRPCError) and exc.status is not Status.DEADLINE_EXCEEDED:
            raise
        if state["events"] == 0:
            raise ChatError(f"deadline of {timeout:g}s passed before the first event") from None
        _end_line(out, state["mode"])
        raise ChatError(
            f"deadline of {timeout:g}s passed mid-stream after {state['events']} event(s) "
            f"({state['text']} characters of text and {state['thinking']} of thinking shown, no "
            "stop event); the answer above is incomplete"
        ) from None
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGINT)
            signal.signal(signal.SIGINT, previous)  # asyncio.run's handler, between streams
    _end_line(out, state["mode"])
    return _Turn(accumulator.result(), state["received_at"])


def _end_line(out: TextIO, mode: str) -> None:
    """End the line the answer was printed on; nothing when nothing was printed (an in-band
    error before any content leaves stdout empty)."""
    if mode:
        out.write("\n")
    out.flush()


async def _open(client: ModelClient, options: ChatOptions) -> tuple[Conversation, ModelSpec]:
    caps = await client.get_capabilities(timeout=min(options.timeout, CAPABILITIES_TIMEOUT))
    if not caps.models:
        raise ChatError("the server serves no models")
    model_id = options.model or caps.models[0].id
    spec = next((m for m in caps.models if m.id == model_id), None)
    if spec is None:
        served = ", ".join(m.id for m in caps.models)
        raise ChatError(f"unknown model {model_id!r}; served: {served}", 2)
    conv = Conversation(
        spec=spec, working_directory=os.getcwd(), tools=options.tools, params=options.params
    )
    if options.system:
        conv.system(options.system)
    return conv, spec


def _finish(turn: _Turn, spec: ModelSpec, out: TextIO) -> str | None:
    """Print the summary line; return the in-band error as ``KIND: message`` (or the reason the
    stream is incomplete), None when the turn succeeded."""
    line = summary_line(turn.result, spec, turn.received_at)
    if line:
        print(line, file=out)
    out.flush()
    error = turn.result.error
    if error is not None:
        return f"{error.kind.name}: {error.message}"
    if not turn.result.complete:
        return "the stream ended without a stop event; the answer above is incomplete"
    return None


async def _complete_turn(
    client: ModelClient,
    conv: Conversation,
    spec: ModelSpec,
    out: TextIO,
    err: TextIO,
    *,
    timeout: float,  # noqa: ASYNC109 - the RPC deadline of each request, seconds
) -> str | None:
    """Stream the next answer and append it to ``conv``'s history; while the model pauses the
    turn (protocol 1.1 STOP_REASON_PAUSE_TURN) the paused assistant message goes back unmodified
    as the last message of the next request, which continues the turn (:data:`PAUSE_MARKER` on
    ``err``), at most :data:`MAX_PAUSE_CONTINUATIONS` times in a row. Returns the problem (see
    :func:`_finish`), or None when the turn ended.

    Raises:
        ChatError: as :func:`_stream_turn` (the history may hold paused messages of this turn).
        _CancelledError: SIGINT during a stream.
    """
    for continuations in range(MAX_PAUSE_CONTINUATIONS + 1):
        turn = await _stream_turn(client, conv, out, timeout)
        problem = _finish(turn, spec, out)
        if problem is not None:
            return problem
        paused = is_paused(turn.result.stop)
        if paused and continuations == MAX_PAUSE_CONTINUATIONS:
            break
        conv.assistant(turn.result)
        if not paused:
            return None
        print(PAUSE_MARKER, file=err, flush=True)
    return (
        f"the model paused the turn again after {MAX_PAUSE_CONTINUATIONS} continuations in a "
        "row; stopped continuing; the answer above is incomplete"
    )


async def chat_once(
    client: ModelClient,
    prompt: str,
    options: ChatOptions,
    out: TextIO,
    err: TextIO | None = None,
) -> int:
    """Stream one answer to ``prompt``, continuing a paused turn (:func:`_complete_turn`;
    markers on ``err``, default stderr); returns 0.

    Raises:
        ChatError: an in-band error, an incomplete stream or a turn still paused after
            :data:`MAX_PAUSE_CONTINUATIONS` continuations (status 1), an invalid request or
            unknown model (2), SIGINT (130).
    """
    conv, spec = await _open(client, options)
    conv.user(prompt)
    try:
        problem = await _complete_turn(
            client, conv, spec, out, sys.stderr if err is None else err, timeout=options.timeout
        )
    except _CancelledError:
        raise ChatError(
            "cancelled (SIGINT); the answer above is incomplete", EXIT_CANCELLED
        ) from None
    if problem is not None:
        raise ChatError(problem)
    return 0


class _Lines:
    """Lines of stdin, read on demand by a daemon thread (so waiting for input never blocks
    the event loop, and Ctrl-C at the prompt ends the session at once: nothing waits for the
    thread). Each line is at most :data:`MAX_LINE_BYTES` + 1 bytes.

    A stream with a file descriptor is read with ``os.read`` on it, never through Python's
    buffered reader: a daemon thread parked inside ``BufferedReader.readline`` holds that
    reader's lock, and interpreter shutdown then aborts the process ("could not acquire lock
    for <_io.BufferedReader name='<stdin>'> at interpreter shutdown")."""

    def __init__(self, stdin: BinaryIO) -> None:
        self._stdin = stdin
        try:
            self._fd: int | None = stdin.fileno()
        except (AttributeError, OSError, ValueError):  # BytesIO and other in-memory streams
            self._fd = None
        self._pending = b""
        self._requests: queue.SimpleQueue[
            tuple[asyncio.AbstractEventLoop, asyncio.Future[bytes | None]]
        ] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="chat-stdin", daemon=True).start()

    def _readline(self) -> bytes:
        if self._fd is None:
            return self._stdin.readline(MAX_LINE_BYTES + 1)
        limit = MAX_LINE_BYTES + 1
        while b"\n" not in self._pending and len(self._pending) < limit:
            chunk = os.read(self._fd, 65536)
            if not chunk:
                break
            self._pending += chunk
        end = self._pending.find(b"\n", 0, limit)
        cut = end + 1 if end >= 0 else min(limit, len(self._pending))
        line, self._pending = self._pending[:cut], self._pending[cut:]
        return line

    def _run(self) -> None:
        while True:
            loop, future = self._requests.get()
            try:
                line = self._readline()
            except (OSError, ValueError):
                line = b""
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(_resolve, future, line or None)
            if not line:
                return

    async def next(self) -> bytes | None:
        """The next line (with its newline), or None at end of input."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes | None] = loop.create_future()
        self._requests.put((loop, future))
        return await future


def _resolve(future: asyncio.Future[bytes | None], line: bytes | None) -> None:
    if not future.done():
        future.set_result(line)


async def chat_interactive(
    client: ModelClient, options: ChatOptions, stdin: BinaryIO, out: TextIO, err: TextIO
) -> int:
    """Read one user turn per line until end of input or ``/exit``; returns 0, or 1 when the
    last turn failed. Tool calls are answered by the next lines, one per call."""
    conv, spec = await _open(client, options)
    lines = _Lines(stdin)
    tty = stdin.isatty()
    status = 0
    while True:
        pending = conv.pending_tool_calls()
        prompt = f"[result of {pending[0].name} {pending[0].id}]> " if pending else "> "
        if tty:
            out.write(prompt)
            out.flush()
        raw = await lines.next()
        if raw is None:
            return status
        if len(raw) > MAX_LINE_BYTES:
            print(f"protocol-py chat: line longer than {MAX_LINE_BYTES} bytes", file=err)
            return 1
        text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if text.strip() in EXIT_COMMANDS:
            return status
        if not text.strip():
            continue
        if pending:
            conv.tool_result(pending[0].id, text)
            if len(pending) > 1:
                continue
            added = conv.messages[-1]
        else:
            added = conv.user(text)
        try:
            problem = await _complete_turn(client, conv, spec, out, err, timeout=options.timeout)
        except _CancelledError:
            print(f"protocol-py chat: cancelled (SIGINT); {TURN_DROPPED}", file=err)
            _drop_from(conv, added)
            continue
        except ChatError as exc:
            print(f"protocol-py chat: {exc}; {TURN_DROPPED}", file=err)
            _drop_from(conv, added)
            status = exc.status
            continue
        if problem is not None:
            print(f"protocol-py chat: {problem}; {TURN_DROPPED}", file=err)
            _drop_from(conv, added)
            status = 1
            continue
        status = 0


def _drop_from(conv: Conversation, message: Any) -> None:
    """Forget a failed turn: ``message`` (the user turn or tool results) and what followed."""
    with contextlib.suppress(ValueError):
        del conv.messages[conv.messages.index(message) :]


def build_params(
    *,
    effort: str | None,
    budget: int | None,
    max_tokens: int | None,
    temperature: float | None,
    stop: Sequence[str] | None,
) -> GenerationParams | None:
    """GenerationParams from ``--effort``, ``--budget`` (tokens), ``--max-tokens`` (tokens),
    ``--temperature`` and ``--stop`` (repeatable); None when no flag was given."""
    if (
        effort is None
        and budget is None
        and max_tokens is None
        and temperature is None
        and not stop
    ):
        return None
    return GenerationParams(
        thinking_effort=effort,
        thinking_budget_tokens=budget,
        max_output_tokens=max_tokens,
        temperature=temperature,
        stop_sequences=list(stop or []),
    )


def stdin_binary() -> BinaryIO:
    """The process's stdin as bytes."""
    return sys.stdin.buffer


def add_chat_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """Add ``chat`` and its options to ``sub``."""
    chat = sub.add_parser(
        "chat",
        help="stream one answer from a running server",
        description="Send one prompt (or, without PROMPT, one turn per line of stdin) to a "
        "running server and stream the answer, then print tokens, cost and stop reason.",
    )
    chat.add_argument("--server", default=DEFAULT_SERVER, metavar="ADDRESS", help=SERVER_HELP)
    add_client_options(chat)
    chat.add_argument(
        "--model", default=None, metavar="ID", help="model id (default: the first served)"
    )
    chat.add_argument(
        "--system",
        default=None,
        metavar="TEXT",
        help="system text, an assembled-context section (default: none)",
    )
    chat.add_argument(
        "--timeout",
        type=deadline_seconds,
        default=120.0,
        metavar="SECONDS",
        help="deadline of the whole answer, seconds (default %(default)g)",
    )
    chat.add_argument(
        "--effort",
        default=None,
        metavar="LEVEL",
        help="thinking effort level, e.g. low, high (default: the model's)",
    )
    chat.add_argument(
        "--budget",
        type=positive_int,
        default=None,
        metavar="TOKENS",
        help="thinking budget, tokens (default: the model's)",
    )
    chat.add_argument(
        "--max-tokens",
        type=positive_int,
        default=None,
        metavar="TOKENS",
        help="max output tokens (default: the model's)",
    )
    chat.add_argument(
        "--temperature",
        type=non_negative_float,
        default=None,
        metavar="NUMBER",
        help="sampling temperature (default: the model's)",
    )
    chat.add_argument(
        "--stop",
        action="append",
        default=None,
        metavar="TEXT",
        help="stop sequence, repeatable (default: none)",
    )
    chat.add_argument(
        "--tools",
        default=None,
        metavar="FILE",
        help="JSON file of tool declarations {name, description, inputSchema}: an array, or an "
        'object with the array under "tools" (default: none)',
    )
    chat.add_argument(
        "prompt",
        metavar="PROMPT",
        nargs="?",
        default=None,
        help="the prompt, '-' for stdin, @FILE for a file's text; omitted: an interactive "
        "session (one turn per line of stdin, /exit or end of input to quit)",
    )


def cmd_chat(args: argparse.Namespace) -> int:
    """``chat``: stream one answer (see :mod:`protocol_py.cli.chat`), or without PROMPT an
    interactive multi-turn session reading stdin line by line."""
    try:
        prompt = read_prompt(args.prompt, stdin_binary())
        options = ChatOptions(
            model=args.model,
            system=args.system,
            timeout=args.timeout,
            params=build_params(
                effort=args.effort,
                budget=args.budget,
                max_tokens=args.max_tokens,
                temperature=args.temperature,
                stop=args.stop,
            ),
            tools=load_tools(args.tools) if args.tools else [],
        )
    except ChatError as exc:
        raise CliError(str(exc), exc.status) from None

    async def run(client: ModelClient) -> int:
        try:
            if prompt is None:
                return await chat_interactive(
                    client, options, stdin_binary(), sys.stdout, sys.stderr
                )
            return await chat_once(client, prompt, options, sys.stdout)
        except ChatError as exc:
            raise CliError(str(exc), exc.status) from None

    try:
        first_call = min(args.timeout, CAPABILITIES_TIMEOUT)  # a deadline escaping chat's own
        status: int = run_client(run, args.server, args, first_call)
    except KeyboardInterrupt:
        print(file=sys.stdout, flush=True)
        raise CliError("cancelled (SIGINT)", EXIT_CANCELLED) from None
    return status
