"""The commands and snippets of README.md and docs/, run as written (so the docs cannot drift):
the README's provider that makes a tool call, its kernel in ten lines and its "Examples" shell
lines, the ``buf curl`` line of docs/server.md, the serve snippet of docs/writing-a-provider.md
and the script and tools file of docs/writing-a-kernel.md. Two substitutions only, both
documented in the README: ``.venv/bin/`` is the bin directory of the environment running the
tests (CI uses its own venv), and ``PORT`` (or the 50051 and 50052 of the README) is the port
the server under test picked."""

from __future__ import annotations

import inspect
import json
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import protocol_py
from protocol_py.cli.chat import load_tools
from protocol_py.codec.structs import from_struct

from ..support.servers import REPO

BIN = Path(sys.executable).parent


def section(title: str, page: str = "README.md") -> str:
    """The text of ``page`` (README.md or a docs page) from the heading ``title`` to the next
    heading of any level."""
    text = (REPO / page).read_text()
    start = text.index(f"\n{title}\n")
    rest = text[start + len(title) + 2 :]
    end = re.search(r"^#{2,3} ", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^ *```{language}\n(.*?)^ *```", text, re.MULTILINE | re.DOTALL)


def commands(text: str) -> list[str]:
    """Shell lines of the ``sh`` blocks, trailing ``# comments`` removed."""
    out = []
    for block in code_blocks(text, "sh"):
        for raw in block.splitlines():
            line = raw.strip()
            if line and not line.startswith("#"):
                out.append(line.split("  #", 1)[0].strip())
    return out


def argv(command: str, port: int | None = None) -> list[str]:
    if port is not None:
        command = command.replace("PORT", str(port)).replace("50051", str(port))
    words = shlex.split(command)
    if words[0].startswith(".venv/bin/"):
        words[0] = str(BIN / words[0].removeprefix(".venv/bin/"))
    return words


EXAMPLES = commands(section("## Examples"))


def test_the_examples_section_lists_the_commands_this_file_runs() -> None:
    assert EXAMPLES == [
        ".venv/bin/protocol-py serve --port 0 --handshake",
        ".venv/bin/python examples/kernel.py 127.0.0.1:PORT",
        ".venv/bin/python examples/tool_loop.py 127.0.0.1:PORT",
        ".venv/bin/python examples/echo_provider.py --port 0",
        ".venv/bin/protocol-py serve --provider examples/echo_provider.py:EchoProvider --port 0",
    ]


def start(
    command: str, ready: re.Pattern[str], stream: str, cwd: Path = REPO
) -> tuple[subprocess.Popen[str], int]:
    """Start a README server command (in the repository, or ``cwd``) and wait (at most 30 s)
    until ``ready`` (with the port as group 1) appears on ``stream``."""
    proc = subprocess.Popen(
        argv(command),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    pipe = proc.stdout if stream == "stdout" else proc.stderr
    assert pipe is not None
    deadline = time.monotonic() + 30
    seen = ""
    pending = b""
    # os.read on the descriptor, not pipe.readline(): readline may pull two lines into the
    # text wrapper's buffer, where select() no longer sees the second one (the ready line).
    while time.monotonic() < deadline and proc.poll() is None:
        if select.select([pipe], [], [], 0.2)[0]:
            chunk = os.read(pipe.fileno(), 65536)
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace") + "\n"
                seen += line
                match = ready.search(line)
                if match:
                    return proc, int(match.group(1))
    proc.kill()
    raise AssertionError(f"{command!r} did not become ready:\n{seen}")


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)  # Ctrl-C, as the README says
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


@pytest.fixture(scope="module")
def readme_server() -> Iterator[int]:
    proc, port = start(EXAMPLES[0], re.compile(r"^1\|tcp\|127\.0\.0\.1:(\d+)\|grpc$"), "stdout")
    try:
        yield port
    finally:
        stop(proc)


def run(command: str, port: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv(command, port), cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )


def run_snippet(snippet: str, directory: Path, port: int) -> subprocess.CompletedProcess[str]:
    """Run a Python snippet of the docs, saved in ``directory``, against the server on ``port``
    (the snippet's 127.0.0.1:50051)."""
    script = directory / "snippet.py"
    script.write_text(snippet.replace("127.0.0.1:50051", f"127.0.0.1:{port}"))
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )


def test_readme_kernel_in_ten_lines_runs_against_the_reference_server(
    readme_server: int, tmp_path: Path
) -> None:
    (snippet,) = code_blocks(section("## A kernel in ten lines"), "python")
    assert len(snippet.splitlines()) <= 20
    done = run_snippet(snippet, tmp_path, readme_server)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"END_TURN 0\.\d+ USD\n", done.stdout), done.stdout


def test_readme_provider_makes_a_tool_call_served_as_the_readme_says(tmp_path: Path) -> None:
    text = section("## A provider that makes a tool call")
    (provider,) = code_blocks(text, "python")
    (kernel,) = code_blocks(section("## A kernel in ten lines"), "python")
    serve_line, chat_line = commands(text)
    assert serve_line.endswith("serve --provider ./weather.py:WeatherCaller --port 50052")
    assert chat_line.startswith(".venv/bin/protocol-py chat --server 127.0.0.1:50052 ")
    (tmp_path / "weather.py").write_text(provider)
    proc, port = start(
        serve_line.replace("--port 50052", "--port 0"),
        re.compile(r"INFO protocol_py\.server serving weather on 127\.0\.0\.1:(\d+)"),
        "stderr",
        cwd=tmp_path,
    )
    try:
        chat = subprocess.run(
            argv(chat_line.replace("50052", str(port))),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert chat.returncode == 0, chat.stderr
        lines = [line for line in chat.stdout.splitlines() if line]
        assert lines == [
            '[tool call get_weather({"city": "Paris"})]',
            "tokens: input 12, output 9; cost: 0.00003 USD; stop: tool_use",
        ]
        done = run_snippet(kernel, tmp_path, port)  # the README's kernel works with it too
        assert (done.returncode, done.stdout) == (0, "TOOL_USE 0.00003 USD\n"), done.stderr
    finally:
        err = stop(proc)
    assert err.count('"rpc": "StreamCompletion"') == 2 and '"outcome": "ok"' in err


def test_kernel_example_routes_streams_accumulates_and_prices(readme_server: int) -> None:
    done = run(EXAMPLES[1], readme_server)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "skipped [0] reference/reference-small:"
    assert "chose [2] reference/reference-large" in lines
    assert "thinking blocks: 1, signed: 1" in lines
    assert re.fullmatch(r"stop: END_TURN; cost: 0\.\d+ USD", lines[-1])


def test_tool_loop_example_runs_the_tool_until_the_model_answers(readme_server: int) -> None:
    done = run(EXAMPLES[2], readme_server)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("step 1: stop TOOL_USE, cost 0.")
    assert lines[1] == "  tool call get_weather({'city': 'Paris'})"  # a word of the prompt
    assert lines[2].startswith("step 2: stop END_TURN")
    assert lines[3].startswith("answer: The tool returned: ") and '"temperature_c": 21' in lines[3]


@pytest.mark.parametrize("index", [3, 4])
def test_echo_provider_example_serves_answers_fails_and_stops(index: int) -> None:
    proc, port = start(
        EXAMPLES[index],
        re.compile(r"INFO protocol_py\.server serving echo on 127\.0\.0\.1:(\d+)"),
        "stderr",
    )
    try:
        chat = [str(BIN / "protocol-py"), "chat", "--server", f"127.0.0.1:{port}"]
        answer = subprocess.run(
            [*chat, "hello echo world"], capture_output=True, text=True, timeout=60, check=False
        )
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.splitlines()[0] == "hello echo world"
        assert answer.stdout.splitlines()[-1] == (
            "tokens: input 3, output 3; cost: 0.0000009 USD; stop: end_turn"
        )
        failed = subprocess.run(
            [*chat, "please fail"], capture_output=True, text=True, timeout=60, check=False
        )
        assert (failed.returncode, failed.stderr) == (
            1,
            "protocol-py chat: INVALID_REQUEST: echo-1 refuses to fail\n",
        )
    finally:
        err = stop(proc)
    assert '"rpc": "StreamCompletion"' in err and '"error_kind": "INVALID_REQUEST"' in err


def test_buf_curl_line_of_the_readme_calls_describe(readme_server: int) -> None:
    reflection = section("## Health checking and reflection", "docs/server.md")
    lines = [c for c in commands(reflection) if "buf curl" in c and "Describe" in c]
    assert lines == [
        ".venv/bin/buf curl --protocol grpc --http2-prior-knowledge "
        "http://127.0.0.1:50051/model.v1.ModelService/Describe"
    ]
    done = run(lines[0], readme_server)
    assert done.returncode == 0, done.stderr
    assert (
        '"name": "reference"' in done.stdout
        and f'"protocolVersion": "{protocol_py.PROTOCOL_VERSION}"' in done.stdout
    )


def test_buf_curl_line_streams_the_example_request_body(readme_server: int) -> None:
    reflection = section("## Health checking and reflection", "docs/server.md")
    (line,) = [c for c in commands(reflection) if "StreamCompletion" in c]
    assert "-d @examples/buf-curl/stream_completion.json" in line
    done = run(line, readme_server)
    assert done.returncode == 0, done.stderr
    events = [json.loads(chunk) for chunk in re.split(r"(?<=\n})\n(?={)", done.stdout.strip())]
    assert list(events[0]) == ["streamStart"]
    text = "".join(e["textDelta"]["text"] for e in events if "textDelta" in e)
    assert "You wrote: Hello there" in text
    assert events[-1]["stop"]["reason"] == "STOP_REASON_END_TURN"


def test_building_requests_script_runs_as_written(readme_server: int, tmp_path: Path) -> None:
    (snippet,) = code_blocks(section("## Building requests", "docs/writing-a-kernel.md"), "python")
    assert "weather_tool = tool(" in snippet and snippet.rstrip().endswith("asyncio.run(main())")
    script = tmp_path / "kernel_turns.py"
    script.write_text(snippet.replace("127.0.0.1:50051", f"127.0.0.1:{readme_server}"))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"stop: END_TURN; cost: 0\.\d+ USD\n", done.stdout), done.stdout


def test_tools_file_format_of_the_readme_is_what_chat_reads(tmp_path: Path) -> None:
    (example,) = code_blocks(section("## Building requests", "docs/writing-a-kernel.md"), "json")
    path = tmp_path / "tools.json"
    path.write_text(example)
    (declared,) = load_tools(str(path))
    assert declared.name == "get_weather" and declared.input_schema is not None
    assert from_struct(declared.input_schema)["properties"] == {"city": {"type": "string"}}


def test_serve_snippet_names_the_real_api() -> None:
    (snippet,) = code_blocks(section("## The contract", "docs/writing-a-provider.md"), "python")
    assert snippet == (
        "from protocol_py import serve\n\n"
        "serve(MyProvider(), port=0, handshake=True)  # blocks until SIGINT/SIGTERM\n"
    )
    params = inspect.signature(protocol_py.serve).parameters
    assert {"port", "handshake", "host", "grace_period", "max_message_size", "log_level"} <= set(
        params
    )
