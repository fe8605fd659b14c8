"""What a new user found following the README (issue 10 and 9 polish), each pinned from outside:
client deadlines and connection bounds, two quick SIGTERMs, one exit rule for input files,
provider loading and start-up errors, cost and validate output, server logs for misbehaving
providers, chat output details, option checks, and the package namespace."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import protocol_py
from protocol_py.cli.app import CONNECT_TIMEOUT, DEFAULT_TIMEOUT, main
from protocol_py.provider import Provider
from protocol_py.providers import ProviderLoadError, load_provider_class
from protocol_py.server import ModelServer
from protocol_py_gen.model.v1 import Capabilities

from ._security import CA
from .conftest import CONSOLE_SCRIPT, REPO, Subprocess, spawn_server

MISBEHAVING = f"{Path(__file__).with_name('misbehaving_provider.py')}:Misbehaving"
PRICING = {"currency": "USD", "tiers": [{"inputPerMtok": 3, "outputPerMtok": 15}]}


def cli(
    *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def stop_server(sub: Subprocess) -> str:
    sub.proc.terminate()
    _, err = sub.proc.communicate(timeout=30)
    assert sub.proc.returncode == 0, err
    return err


@pytest.fixture(scope="module")
def odd_server() -> Iterator[Subprocess]:
    sub = spawn_server("--provider", MISBEHAVING)
    try:
        yield sub
    finally:
        if sub.proc.poll() is None:
            sub.proc.kill()
            sub.proc.communicate(timeout=30)


# -- 3: deadlines and connection bounds -----------------------------------------------------------


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A TCP listener that accepts connections and never sends a byte (no HTTP/2 preface)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        done.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        server.close()


@pytest.mark.parametrize("command", ["describe", "capabilities"])
def test_describe_and_capabilities_give_up_on_a_silent_listener_after_timeout(
    command: str, silent_listener: str, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    assert main([command, "--server", silent_listener, "--timeout", "1"]) == 1
    took = time.monotonic() - started
    err = capsys.readouterr().err
    with capsys.disabled():
        print(f"\n{command} --timeout 1 against a silent listener gave up after {took:.2f}s")
    expected = f"no answer from {silent_listener} within 1s (deadline exceeded)"
    assert err == f"protocol-py {command}: {expected}\n"
    assert took < 20  # generous: the contract is the 1 s deadline, the machine may be loaded


def test_chat_first_call_is_bounded_even_with_a_long_timeout(
    silent_listener: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("protocol_py.cli.chat.CAPABILITIES_TIMEOUT", 1.0)
    monkeypatch.setattr("protocol_py.cli.app.CAPABILITIES_TIMEOUT", 1.0)
    started = time.monotonic()
    assert main(["chat", "--server", silent_listener, "--timeout", "300", "hi"]) == 1
    took = time.monotonic() - started
    assert capsys.readouterr().err == (
        f"protocol-py chat: no answer from {silent_listener} within 1s (deadline exceeded)\n"
    )
    with capsys.disabled():
        print(f"\nchat --timeout 300 against a silent listener gave up after {took:.2f}s")
    assert took < 20


def test_client_deadlines_are_named_documented_constants() -> None:
    assert (DEFAULT_TIMEOUT, CONNECT_TIMEOUT) == (30.0, 10.0)
    for command in ("describe", "capabilities"):
        help_text = cli(command, "--help").stdout
        assert "--timeout SECONDS" in help_text and "(default 30)" in help_text
    readme = (REPO / "docs" / "cli.md").read_text()
    assert "`describe [--server H:P] [--timeout S]`" in readme
    assert "open the connection within 10 s" in readme


# -- 4: two quick SIGTERMs ------------------------------------------------------------------------


@pytest.mark.parametrize("gap", [0.0, 0.005, 0.02, 0.04])
def test_two_quick_sigterms_exit_0(gap: float) -> None:
    sub = spawn_server()
    sub.proc.send_signal(signal.SIGTERM)
    time.sleep(gap)
    if sub.proc.poll() is None:
        sub.proc.send_signal(signal.SIGTERM)
    _, err = sub.proc.communicate(timeout=30)
    assert sub.proc.returncode == 0, err
    assert "stopped" in err


# -- 5: one exit rule for input files -------------------------------------------------------------


def test_a_missing_input_file_exits_1_in_every_command(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.json")
    usage = write(tmp_path, "u.json", {"inputTokens": 1, "outputTokens": 1})
    runs = {
        "chat @FILE": cli("chat", "--server", "127.0.0.1:9", f"@{missing}"),
        "chat --tools": cli("chat", "--server", "127.0.0.1:9", "--tools", missing, "hi"),
        "validate": cli("validate", missing),
        "cost --pricing": cli("cost", "--pricing", missing, "--usage", usage),
    }
    for what, done in runs.items():
        assert done.returncode == 1, (what, done.stderr)
        said = done.stdout + done.stderr  # validate lists its violations on stdout
        assert "cannot read: No such file or directory" in said, (what, said)


# -- 6 and 8: serve's start-up errors -------------------------------------------------------------


def test_module_that_is_not_importable_says_sys_path_and_the_file_form(tmp_path: Path) -> None:
    (tmp_path / "slowecho.py").write_text("x = 1\n")
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "serve", "--provider", "slowecho:SlowEcho"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "protocol-py serve: provider 'slowecho:SlowEcho': no module named 'slowecho': the module "
        "must be importable (on sys.path, e.g. via PYTHONPATH, or installed); for a source file "
        "give path/to/file.py:Class (e.g. ./slowecho.py:SlowEcho)\n"
    )


def test_discover_against_an_unreachable_upstream_is_a_plain_message() -> None:
    done = cli(
        "serve", "--provider", "openai", "--discover", "--base-url",
        "http://127.0.0.1:9/v1?key=SECRETQ", "--port", "0",
    )  # fmt: skip
    assert done.returncode == 1
    last = done.stderr.splitlines()[-1]
    assert last == (
        "protocol-py serve: --discover: cannot reach upstream http://127.0.0.1:9/v1?key=*** "
        "(GET /models: ConnectError)"
    )
    assert "internal error" not in done.stderr and "RuntimeError" not in done.stderr
    assert "SECRETQ" not in done.stderr


# -- 9a, 9b: cost ---------------------------------------------------------------------------------


def test_cost_text_numbers_tiers_from_1_and_json_keeps_the_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pricing = write(
        tmp_path,
        "p.json",
        {
            "currency": "USD",
            "tiers": [
                {"inputPerMtok": 1, "outputPerMtok": 2, "inputTokensUntil": 1000},
                {"inputPerMtok": 3, "outputPerMtok": 4, "inputTokensFrom": 1000},
            ],
        },
    )
    usage = write(tmp_path, "u.json", {"inputTokens": 5000, "outputTokens": 1})
    assert main(["cost", "--pricing", pricing, "--usage", usage]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "pricing: tier 2"
    assert main(["cost", "--pricing", pricing, "--usage", usage, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tier_index"] == 1


def test_cost_reports_every_usage_problem_with_file_and_rule_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pricing = write(tmp_path, "p.json", PRICING)
    usage = write(tmp_path, "u.json", {"inputTokens": -5, "outputTokens": "x"})
    assert main(["cost", "--pricing", pricing, "--usage", usage]) == 1
    assert capsys.readouterr().err == (
        f"protocol-py cost: invalid input: 2 error(s): {usage}: output_tokens: json.invalid: "
        'expected an integer (int64, as a number or a decimal string), got JSON string "x"; '
        f"{usage}: input_tokens: usage.negative: token count -5 is negative\n"
    )
    alone = write(tmp_path, "u2.json", {"inputTokens": 3, "outputTokens": 1, "reasoningTokens": -1})
    assert main(["cost", "--pricing", pricing, "--usage", alone]) == 1
    assert capsys.readouterr().err == (
        f"protocol-py cost: invalid input: 1 error(s): {alone}: reasoning_tokens: "
        "usage.negative: token count -1 is negative\n"
    )


# -- 9c, 9i: server logs --------------------------------------------------------------------------


def records(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def test_provider_exception_is_one_line_without_its_value_and_in_band_errors_get_detail() -> None:
    sub = spawn_server("--provider", MISBEHAVING)
    try:
        raised = cli("chat", "--server", sub.address, "raise")
        assert (raised.returncode, raised.stderr) == (
            1,
            "protocol-py chat: PERMANENT: internal provider error (KeyError)\n",
        )
        limited = cli("chat", "--server", sub.address, "slow down")
        assert limited.stderr == "protocol-py chat: RATE_LIMITED: slow down\n"
        permanent = cli("chat", "--server", sub.address, "permanent")
        assert permanent.stderr == "protocol-py chat: PERMANENT: permanent\n"
        assert cli("chat", "--server", sub.address, "still there?").returncode == 0
    finally:
        err = stop_server(sub)
    assert "secret" not in err and "Traceback" not in err
    text = [line for line in err.splitlines() if not line.startswith("{")]
    (error_line,) = [line for line in text if " ERROR " in line]
    source = Path(MISBEHAVING.rpartition(":")[0]).read_text().splitlines()
    line = source.index('            raise KeyError("secret")') + 1
    assert error_line.endswith(
        "ERROR protocol_py.server provider Misbehaving: StreamCompletion raised KeyError at "
        f"misbehaving_provider.py:{line} in stream"
    )
    streams = [r for r in records(err) if r["rpc"] == "StreamCompletion"]
    assert [(r["error_kind"], r["detail"]) for r in streams if "error_kind" in r] == [
        ("PERMANENT", "internal provider error (KeyError)"),
        ("RATE_LIMITED", "slow down"),
        ("PERMANENT", "permanent"),
    ]


def test_full_traceback_only_at_debug() -> None:
    sub = spawn_server("--provider", MISBEHAVING, "--log-level", "DEBUG")
    try:
        assert cli("chat", "--server", sub.address, "raise").returncode == 1
    finally:
        err = stop_server(sub)
    assert "DEBUG protocol_py.server provider Misbehaving: StreamCompletion traceback" in err
    assert "Traceback (most recent call last)" in err


def test_a_provider_yielding_after_stop_gets_one_warning_and_the_client_stream_is_unchanged() -> (
    None
):
    sub = spawn_server("--provider", MISBEHAVING)
    try:
        done = cli("chat", "--server", sub.address, "extra")
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[0] == "ok" and "after the end" not in done.stdout
        assert cli("chat", "--server", sub.address, "plain").returncode == 0
    finally:
        err = stop_server(sub)
    warnings = [line for line in err.splitlines() if " WARNING " in line]
    assert len(warnings) == 1
    assert warnings[0].endswith(
        "provider Misbehaving yielded an event after its final event (stop or error); it was "
        "dropped and the provider's stream closed"
    )
    assert [r["outcome"] for r in records(err) if r["rpc"] == "StreamCompletion"] == ["ok", "ok"]


# -- 9d, 9e: chat output --------------------------------------------------------------------------


def test_in_band_error_before_any_text_prints_nothing_on_stdout(odd_server: Subprocess) -> None:
    done = cli("chat", "--server", odd_server.address, "slow down")
    assert (done.returncode, done.stdout) == (1, "")


def test_mid_stream_deadline_counts_the_text_and_thinking_shown(odd_server: Subprocess) -> None:
    done = cli("chat", "--server", odd_server.address, "--timeout", "2", "think then stall")
    assert done.returncode == 1
    assert done.stdout == "[thinking] hmm, let me see\nPartial\n"
    assert done.stderr == (
        "protocol-py chat: deadline of 2s passed mid-stream after 2 event(s) (7 characters of "
        "text and 15 of thinking shown, no stop event); the answer above is incomplete\n"
    )


def test_a_failed_interactive_turn_says_it_was_dropped(odd_server: Subprocess) -> None:
    done = cli("chat", "--server", odd_server.address, stdin="slow down\nhello\n")
    assert done.returncode == 0
    assert done.stderr == (
        "protocol-py chat: RATE_LIMITED: slow down; the turn was dropped; the session goes on\n"
    )
    assert done.stdout.startswith("ok\n")


# -- 9f, 9g: option checks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--temperature", "nan"], "argument --temperature: must be a finite number, got 'nan'"),
        (["--temperature", "inf"], "argument --temperature: must be a finite number, got 'inf'"),
        (["--temperature", "-1"], "argument --temperature: must be >= 0, got '-1'"),
        (["--timeout", "0"], "argument --timeout: must be > 0 seconds, got '0'"),
        (["--timeout", "inf"], "argument --timeout: must be a finite number, got 'inf'"),
    ],
)
def test_non_finite_and_zero_option_values_are_usage_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["chat", *args, "hi"])
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"protocol-py chat: error: {message}"


@pytest.mark.parametrize("command", ["chat", "describe", "capabilities"])
def test_a_server_address_without_port_is_a_usage_error_naming_the_forms(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["hi"] if command == "chat" else []
    assert main([command, "--server", "nonsense", *extra]) == 2
    assert capsys.readouterr().err == (
        f"protocol-py {command}: --server 'nonsense': no port; expected HOST:PORT, "
        "[IPv6]:PORT or unix:PATH\n"
    )


# -- 9h: provider names ---------------------------------------------------------------------------


class Nameless(Provider):
    def capabilities(self) -> Capabilities:
        return Capabilities()

    async def stream(self, request: Any, context: Any) -> Any:
        raise NotImplementedError


class Named(Nameless):
    name = "named"


class ChildOfNamed(Named):
    pass


async def test_a_provider_without_a_name_is_named_after_its_class() -> None:
    assert (Nameless.name, Named.name, ChildOfNamed.name) == ("Nameless", "named", "named")
    assert Nameless().describe().name == "Nameless"
    with pytest.raises(ValueError, match="invalid capabilities of provider 'Nameless'"):
        await ModelServer(Nameless()).start("127.0.0.1", 0)


@pytest.mark.parametrize(
    "spec", ["no_such_module_xyz:Thing", "json:NoSuchClass", "json:dumps", "missing/file.py:X"]
)
def test_provider_load_errors_share_one_prefix(
    spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ProviderLoadError) as info:
        load_provider_class(spec)
    assert str(info.value).startswith((f"provider {spec!r}: ", "provider file "))
    assert main(["serve", "--provider", spec]) == 2
    assert capsys.readouterr().err.startswith("protocol-py serve: provider ")


# -- 9j: the package namespace --------------------------------------------------------------------


def test_dir_of_the_package_is_its_public_api() -> None:
    names = dir(protocol_py)
    assert not {"Any", "TYPE_CHECKING", "annotations", "importlib"} & set(names)
    assert set(protocol_py.__all__) <= set(names)
    assert {n for n in names if not n.startswith("__")} == set(protocol_py.__all__)


# -- 9k: validate ---------------------------------------------------------------------------------


def test_validate_names_what_could_not_be_determined(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(tmp_path, "bad1.json", "{")
    assert main(["validate", bad]) == 1
    assert capsys.readouterr().err == f"{bad}: not valid JSON: 1 error(s)\n"
    array = write(tmp_path, "array.json", "[]")
    assert main(["validate", array]) == 1
    assert capsys.readouterr().err == f"{array}: not a JSON object: 1 error(s)\n"
    huge = write(
        tmp_path,
        "huge.json",
        '{"currency": "USD", "tiers": [{"inputPerMtok": 1e400, "outputPerMtok": 1}]}',
    )
    assert main(["validate", huge]) == 1
    out = capsys.readouterr().out
    assert out == (
        "tiers[0].input_per_mtok: json.invalid: not a finite number: the JSON number is beyond "
        "the range of a double\n"
    )


# -- 9l: examples against the echo provider -------------------------------------------------------


def test_kernel_example_runs_against_the_echo_provider_too() -> None:
    sub = spawn_server("--provider", f"{REPO / 'examples' / 'echo_provider.py'}:EchoProvider")
    try:
        done = subprocess.run(
            [str(Path(CONSOLE_SCRIPT).parent / "python"), "examples/kernel.py", sub.address],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert "without thinking: chose [0] echo/echo-1" in lines
        assert lines[-1].startswith("stop: END_TURN; cost: ")
    finally:
        stop_server(sub)


# -- TLS: a refused client certificate ------------------------------------------------------------


def test_a_connection_lost_before_any_answer_under_tls_mentions_the_client_certificate(
    tmp_path: Path,
) -> None:
    ca = CA(tmp_path)
    server = ca.issue("localhost", client=False)
    sub = spawn_server(
        "--tls-cert", str(server.cert), "--tls-key", str(server.key),
        "--tls-client-ca", str(ca.cert),
    )  # fmt: skip
    try:
        refused = cli("describe", "--server", sub.address, "--tls-ca", str(ca.cert))
        assert refused.returncode == 1
        assert refused.stderr.startswith(f"protocol-py describe: connection to {sub.address} lost")
        assert refused.stderr.endswith(
            "before any answer: the server may have refused this client's certificate (mutual "
            "TLS: --tls-cert/--tls-key issued by a CA the server trusts)\n"
        ), refused.stderr
        assert "reference" in cli("describe", *_identity(ca, sub)).stdout
    finally:
        stop_server(sub)


def _identity(ca: CA, sub: Subprocess) -> list[str]:
    client = ca.issue("client", client=True)
    return [
        "--server", sub.address, "--tls-ca", str(ca.cert),
        "--tls-cert", str(client.cert), "--tls-key", str(client.key),
    ]  # fmt: skip
