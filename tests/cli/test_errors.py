"""``protocol-py`` error reporting: exit statuses (usage errors 2,
unreadable or invalid input files 1, in every command), one stderr line per failure with no
repeated prefix, ``--at ""`` refused, and a deadline that passes mid-stream in ``chat`` reported
as such (not as a connection failure)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from protocol_py.cli import main
from protocol_py.client.client import ModelClient
from protocol_py.codec.structs import to_struct
from protocol_py_gen.model.v1 import ConfigureRequest

from ..support.servers import Running
from ._console import cli


def write(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    pricing = write(
        tmp_path, "p.json", {"currency": "USD", "tiers": [{"inputPerMtok": 1, "outputPerMtok": 2}]}
    )
    usage = write(tmp_path, "u.json", {"inputTokens": 1000000})
    return pricing, usage


def test_cost_empty_at_is_a_usage_error(
    files: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    pricing, usage = files
    assert main(["cost", "--pricing", pricing, "--usage", usage, "--at", ""]) == 2
    err = capsys.readouterr().err
    assert err == "protocol-py cost: --at: empty; expected an ISO 8601 date or date-time\n"


def test_cost_bad_at_names_the_option_once(
    files: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    pricing, usage = files
    assert main(["cost", "--pricing", pricing, "--usage", usage, "--at", "garbage"]) == 2
    err = capsys.readouterr().err
    assert err.count("--at") == 1, err
    assert err.startswith("protocol-py cost: --at: 'garbage' is not an ISO 8601")


@pytest.mark.parametrize("which", ["--pricing", "--usage"])
def test_unreadable_input_file_exits_1_in_cost_and_validate(
    files: tuple[str, str], tmp_path: Path, which: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pricing, usage = files
    missing = str(tmp_path / "none.json")
    args = {"--pricing": pricing, "--usage": usage, which: missing}
    assert main(["cost", "--pricing", args["--pricing"], "--usage", args["--usage"]]) == 1
    err = capsys.readouterr().err
    assert err == f"protocol-py cost: {which} {missing}: cannot read: No such file or directory\n"
    assert main(["cost", "--pricing", str(tmp_path), "--usage", usage]) == 1
    assert "Is a directory" in capsys.readouterr().err
    assert main(["validate", missing]) == 1
    assert "cannot read" in capsys.readouterr().out


def test_cost_invalid_json_file_exits_1(
    files: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pricing, _ = files
    garbage = write(tmp_path, "g.json", "{nope")
    assert main(["cost", "--pricing", pricing, "--usage", garbage]) == 1
    assert "not valid JSON" in capsys.readouterr().err


def test_cost_invalid_input_is_one_stderr_line(
    files: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pricing, _ = files
    bad = write(tmp_path, "bad.json", {"inputTokens": "many", "outputTokens": "few"})
    assert main(["cost", "--pricing", pricing, "--usage", bad]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "input_tokens: json.invalid" in err and "output_tokens: json.invalid" in err


async def test_chat_deadline_mid_stream_is_not_a_connection_failure(
    running: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    async with ModelClient.connect(running.address) as client:
        await client.stub.configure(
            ConfigureRequest(config=to_struct({"pace_tokens_per_second": 20})), timeout=5
        )
    status = await asyncio.to_thread(
        main, ["chat", "--server", running.address, "--timeout", "1", "Hello there"]
    )
    captured = capsys.readouterr()
    assert status == 1
    assert "cannot connect" not in captured.err
    assert "deadline of 1s passed mid-stream after" in captured.err
    assert "the answer above is incomplete" in captured.err
    assert captured.out.strip()  # part of the answer was printed


def test_cost_bad_at_is_a_usage_error_before_any_file_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "none.json")
    assert main(["cost", "--pricing", missing, "--usage", missing, "--at", ""]) == 2
    assert capsys.readouterr().err.startswith("protocol-py cost: --at: empty")


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
