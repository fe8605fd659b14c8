"""``protocol-py chat``: prompt from ``-``/``@FILE`` (1 MiB), the interactive session (pipe and
pseudo-terminal) that keeps history and replays thinking, the generation flags and
``--tools``, in-band errors as ``protocol-py chat: ...``, and SIGINT mid-stream."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol_py.cli.chat import MAX_PAUSE_CONTINUATIONS, PAUSE_MARKER, TURN_DROPPED
from protocol_py.client.client import ModelClient

from ..support.servers import CONSOLE_SCRIPT, REPO, Subprocess, spawn_server

RECORDING = REPO / "tests" / "cli" / "recording_provider.py"
TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather for a city",
        "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


def chat(
    address: str, *args: str, stdin: str | bytes | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONSOLE_SCRIPT), "chat", "--server", address, *args],
        input=stdin.decode() if isinstance(stdin, bytes) else stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def configure(address: str, config: dict[str, Any]) -> None:
    async def run() -> None:
        async with ModelClient.connect(address) as client:
            await client.configure(config, timeout=10)

    asyncio.run(run())


def still_serving(address: str) -> bool:
    async def run() -> bool:
        async with ModelClient.connect(address) as client:
            return (await client.describe(timeout=10)).name != ""

    return asyncio.run(run())


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Subprocess, Path]]:
    """The recording provider (loaded by file path), writing each request to a JSON-lines
    file."""
    record = tmp_path / "requests.jsonl"
    monkeypatch.setenv("RECORD_FILE", str(record))
    sub = spawn_server("--provider", f"{RECORDING}:RecordingProvider")
    try:
        yield sub, record
    finally:
        sub.proc.terminate()
        sub.proc.communicate(timeout=15)


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_prompt_of_one_mebibyte_from_a_file_and_from_stdin(
    cli_server: Subprocess, tmp_path: Path
) -> None:
    words = 2**20 // 5
    prompt = "word " * words + "x" * (2**20 - 5 * words)
    assert len(prompt.encode()) == 2**20
    path = tmp_path / "prompt.txt"
    path.write_text(prompt)
    by_file = chat(cli_server.address, "--max-tokens", "40", f"@{path}")
    assert by_file.returncode == 0, by_file.stderr
    # reference tokenizer: each word and each space is a token, plus the x-run and framing
    last = by_file.stdout.splitlines()[-1]
    assert last.startswith(f"tokens: input {2 * words + 6}, output 40")
    assert last.endswith("stop: max_tokens")
    by_stdin = chat(cli_server.address, "--max-tokens", "40", "-", stdin=prompt + "\n")
    assert by_stdin.returncode == 0, by_stdin.stderr
    assert by_stdin.stdout.splitlines()[-1] == last  # one trailing newline of stdin dropped


def test_prompt_input_problems_exit_1_like_every_bad_input_file(
    cli_server: Subprocess, tmp_path: Path
) -> None:
    missing = chat(cli_server.address, f"@{tmp_path / 'none.txt'}")
    assert missing.returncode == 1
    assert missing.stderr.startswith("protocol-py chat: ") and "cannot read" in missing.stderr
    empty = chat(cli_server.address, "-", stdin="")
    assert (empty.returncode, empty.stderr) == (1, "protocol-py chat: stdin: empty prompt\n")
    argument = chat(cli_server.address, " ")
    assert (argument.returncode, argument.stderr) == (2, "protocol-py chat: PROMPT: empty prompt\n")
    literal = chat(cli_server.address, "--model", "reference-small", "@@home")
    assert literal.returncode == 0 and "You wrote: @home" in literal.stdout


def test_interactive_session_over_a_pipe_keeps_history_and_replays_thinking(
    recorded: tuple[Subprocess, Path], tmp_path: Path
) -> None:
    sub, record = recorded
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    lines = "Hello there\n\nuse tool please\nsunny 21C\n/exit\nnever sent\n"
    done = chat(sub.address, "--tools", str(tools), stdin=lines)
    assert done.returncode == 0, done.stderr
    summaries = [line for line in done.stdout.splitlines() if line.startswith("tokens: ")]
    assert [s.rsplit("stop: ", 1)[1] for s in summaries] == ["end_turn", "tool_use", "end_turn"]
    assert '[tool call get_weather({"city":"city"})]' in done.stdout
    assert "The tool returned: sunny 21C." in done.stdout
    assert "> " not in done.stdout  # no prompt without a terminal
    first, second, third = records(record)
    assert len({r["session_id"] for r in (first, second, third)}) == 1
    assert first["turn_id"] != second["turn_id"] == third["turn_id"]
    roles = [m["role"] for m in third["messages"]]
    assert roles == ["USER", "ASSISTANT", "USER", "ASSISTANT", "USER"]
    replayed = third["messages"][1]["blocks"]
    assert replayed[0].startswith("thinking:refsig:") and replayed[1:] == ["text"]
    assert third["messages"][3]["blocks"][-1].startswith("tool_use:")
    assert third["messages"][4]["blocks"] == [
        "tool_result:" + third["messages"][3]["blocks"][-1].split(":", 1)[1]
    ]
    assert third["tools"] == ["get_weather"]


def test_interactive_session_on_a_terminal_shows_prompts(cli_server: Subprocess) -> None:
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "chat", "--server", cli_server.address, "--model", "reference-small"],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env={**os.environ, "NO_COLOR": "1"},
    )
    os.close(secondary)
    seen = b""

    def read_until(marker: bytes, limit: float = 60) -> None:
        nonlocal seen
        deadline = time.monotonic() + limit
        while marker not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(primary, 65536)
                except OSError:
                    break
        assert marker in seen, seen

    try:
        read_until(b"> ")
        os.write(primary, b"Hello tty\n")
        read_until(b"stop: end_turn")
        read_until(b"> ")
        os.write(primary, b"/exit\n")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(primary)
    assert b"You wrote: Hello tty" in seen


def test_generation_flags_reach_the_request(recorded: tuple[Subprocess, Path]) -> None:
    sub, record = recorded
    stopped = chat(sub.address, "--stop", "nothing", "--stop", "wrote", "--temperature", "0", "Hi")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.splitlines()[-1].endswith("stop: stop_sequence 'wrote'")
    capped = chat(
        sub.address, "--model", "reference-medium", "--budget", "1024", "--max-tokens", "20", "Hi"
    )
    assert capped.returncode == 0, capped.stderr
    assert "output 20 (reasoning 20)" in capped.stdout and "stop: max_tokens" in capped.stdout
    effort = chat(sub.address, "--effort", "low", "Hi")
    assert effort.returncode == 0 and "reasoning at effort low" in effort.stdout
    assert all(r["params"] for r in records(record))


def test_flags_the_model_cannot_take_are_refused_naming_the_field(
    cli_server: Subprocess, tmp_path: Path
) -> None:
    refused = chat(cli_server.address, "--model", "reference-small", "--effort", "high", "hi")
    assert refused.returncode == 2
    assert refused.stderr.startswith("protocol-py chat: invalid request: params.thinking_effort: ")
    bad_tools = tmp_path / "tools.json"
    bad_tools.write_text('[{"name": "x",}]')
    broken = chat(cli_server.address, "--tools", str(bad_tools), "hi")
    assert broken.returncode == 1  # a bad input file, as in validate and cost
    assert "not valid JSON: line 1 column 15: expected a property name" in broken.stderr
    bad_tools.write_text('[{"name": "x", "inputSchema": 3}]')
    wrong = chat(cli_server.address, "--tools", str(bad_tools), "hi")
    assert wrong.returncode == 1 and "[0].input_schema" in wrong.stderr, wrong.stderr
    negative = chat(cli_server.address, "--max-tokens", "-1", "hi")
    assert negative.returncode == 2 and "must be > 0" in negative.stderr


def test_in_band_error_is_one_chat_line_without_a_usage_placeholder(cli_server: Subprocess) -> None:
    configure(cli_server.address, {"simulate_error": {"kind": "rate_limited", "after_events": 3}})
    failed = chat(cli_server.address, "Hello there")
    assert failed.returncode == 1
    assert failed.stderr.startswith("protocol-py chat: RATE_LIMITED: ")
    assert failed.stderr.count("\n") == 1
    assert "no usage reported" not in failed.stdout + failed.stderr
    assert failed.stdout.endswith("\n")
    # the same in a session: the failed turn is reported and dropped, the session goes on
    configure(cli_server.address, {})
    session = chat(cli_server.address, "--model", "reference-small", stdin="one\ntwo\n")
    assert session.returncode == 0 and session.stdout.count("stop: end_turn") == 2


def popen_interruptible(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen`` with SIGINT at its default in the child, as under a terminal. A test
    run started in the background (``&`` in a script, ``nohup``) has SIGINT ignored, which a
    child inherits through exec, and a Python started that way never raises KeyboardInterrupt:
    while the child starts, this process handles SIGINT itself (a handler is reset to the
    default at exec)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(*args, **kwargs)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_sigint_mid_stream_ends_the_line_and_says_cancelled(cli_server: Subprocess) -> None:
    configure(cli_server.address, {"pace_tokens_per_second": 30})
    proc = popen_interruptible(
        [str(CONSOLE_SCRIPT), "chat", "--server", cli_server.address, "Hello there"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    assert ready, "no output from chat"
    first = os.read(proc.stdout.fileno(), 4096)
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=30)
    elapsed = time.monotonic() - started
    print(f"chat exited {elapsed:.3f}s after SIGINT")
    out = (first + rest).decode()
    assert proc.returncode == 130, err
    assert out.startswith("[thinking] ") and out.endswith("\n") and "tokens:" not in out
    assert err.decode() == (
        "protocol-py chat: cancelled (SIGINT); the answer above is incomplete\n"
    )
    assert still_serving(cli_server.address)


def wait_for(pipe: Any, marker: bytes, seen: bytearray, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while marker not in seen and time.monotonic() < deadline:
        if select.select([pipe], [], [], 0.2)[0]:
            chunk = os.read(pipe.fileno(), 65536)
            if not chunk:
                break
            seen.extend(chunk)
    assert marker in seen, bytes(seen)


def interrupt_at_the_prompt(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """Send SIGINT to a session waiting for its next line, wait for it to exit with its stdin
    still open, then collect the rest of its output.

    Closing stdin first (as ``communicate`` does) would race the signal: a session that reads
    end of input before the signal is handled ends as on Ctrl-D. And a signal that lands just
    after a stream printed its last line, before the session took SIGINT back, cancels that
    (finished) turn instead; the session then goes on waiting, and a second SIGINT ends it.
    """
    for _ in range(3):
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
            break
        except subprocess.TimeoutExpired:
            continue
    return proc.communicate(timeout=30)


def test_sigint_in_a_session_drops_the_turn_and_the_session_goes_on(
    cli_server: Subprocess,
) -> None:
    configure(cli_server.address, {"pace_tokens_per_second": 30})
    proc = popen_interruptible(
        [str(CONSOLE_SCRIPT), "chat", "--server", cli_server.address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    try:
        proc.stdin.write(b"Hello there\n")
        proc.stdin.flush()
        wait_for(proc.stdout, b"[thinking] ", out)
        proc.send_signal(signal.SIGINT)
        wait_for(
            proc.stderr,
            b"protocol-py chat: cancelled (SIGINT); the turn was dropped; the session goes on\n",
            err,
        )
        configure(cli_server.address, {})  # full speed again
        proc.stdin.write(b"Second try\n")
        proc.stdin.flush()
        wait_for(proc.stdout, b"stop: end_turn\n", out)
        rest, tail = interrupt_at_the_prompt(proc)  # at the prompt: the session ends
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = (bytes(out) + rest).decode()
    assert proc.returncode == 130
    assert (bytes(err) + tail).decode().endswith("protocol-py chat: cancelled (SIGINT)\n")
    assert text.count("stop: end_turn") == 1 and "You wrote: Second try" in text
    cancelled_line = text.split("[thinking] ", 1)[1].split("\n", 1)[0]
    assert "You wrote" not in cancelled_line  # the first answer was cut and its line ended
    assert still_serving(cli_server.address)


def test_sigint_at_the_session_prompt_exits_130_every_time(cli_server: Subprocess) -> None:
    """The stdin reader thread never holds Python's buffered-reader lock while it waits, so
    interpreter shutdown after Ctrl-C at the prompt never aborts ("could not acquire lock for
    <_io.BufferedReader name='<stdin>'> at interpreter shutdown", exit -6)."""
    for _ in range(5):
        proc = popen_interruptible(
            [str(CONSOLE_SCRIPT), "chat", "--server", cli_server.address],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        out = bytearray()
        try:
            proc.stdin.write(b"Hello there\n")
            proc.stdin.flush()
            wait_for(proc.stdout, b"stop: end_turn\n", out)
            # at the prompt, the reader thread waiting on stdin
            _, err = interrupt_at_the_prompt(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 130, err.decode(errors="replace")
        assert b"Fatal Python error" not in err


PAUSING = REPO / "tests" / "cli" / "pausing_provider.py"


def _stops(stdout: str) -> list[str]:
    return [line.rsplit("stop: ", 1)[1] for line in stdout.splitlines() if "; stop: " in line]


def test_one_shot_chat_continues_a_paused_turn_to_its_end(
    recorded: tuple[Subprocess, Path],
) -> None:
    sub, record = recorded
    done = chat(sub.address, "please pause turn now")
    assert done.returncode == 0, done.stderr
    assert _stops(done.stdout) == ["pause_turn", "end_turn"]
    assert done.stderr.count(PAUSE_MARKER) == 1
    first, second = records(record)
    assert [m["role"] for m in second["messages"]] == ["USER", "ASSISTANT"]  # paused, sent back
    assert second["turn_id"] == first["turn_id"]  # the same turn continues


def test_interactive_history_holds_the_paused_and_continued_messages_of_the_turn(
    recorded: tuple[Subprocess, Path],
) -> None:
    sub, record = recorded
    done = chat(sub.address, stdin="please pause turn now\nand then hello\n")
    assert done.returncode == 0, done.stderr
    assert _stops(done.stdout) == ["pause_turn", "end_turn", "end_turn"]
    assert done.stderr.count(PAUSE_MARKER) == 1 and "dropped" not in done.stderr
    first, second, third = records(record)
    assert [m["role"] for m in first["messages"]] == ["USER"]
    assert [m["role"] for m in second["messages"]] == ["USER", "ASSISTANT"]
    roles = [m["role"] for m in third["messages"]]
    assert roles == ["USER", "ASSISTANT", "ASSISTANT", "USER"]
    assert third["messages"][1] == second["messages"][1]  # the paused message, unmodified
    assert first["turn_id"] == second["turn_id"] != third["turn_id"]


def test_chat_stops_continuing_after_the_bound_and_the_session_goes_on() -> None:
    sub = spawn_server("--provider", f"{PAUSING}:AlwaysPausingProvider")
    try:
        once = chat(sub.address, "hello")
        assert once.returncode == 1
        assert _stops(once.stdout) == ["pause_turn"] * (MAX_PAUSE_CONTINUATIONS + 1)
        assert once.stderr.count(PAUSE_MARKER) == MAX_PAUSE_CONTINUATIONS
        assert once.stderr.splitlines()[-1] == (
            "protocol-py chat: the model paused the turn again after 8 continuations in a row; "
            "stopped continuing; the answer above is incomplete"
        )
        session = chat(sub.address, stdin="hello\n")  # the turn is dropped, the session ends
        assert session.returncode == 1
        assert session.stderr.rstrip().endswith(f"incomplete; {TURN_DROPPED}")
        assert sub.proc.poll() is None and still_serving(sub.address)
    finally:
        sub.proc.terminate()
        sub.proc.communicate(timeout=15)
