"""Option parsing of ``protocol-py``: defaults shown in help, usage errors named by the subcommand,
non-finite or zero option values, a server address without a port."""

from __future__ import annotations

import pytest

from protocol_py.cli import main


@pytest.mark.parametrize("command", ["chat", "capabilities", "describe"])
def test_help_shows_the_server_default(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default 127.0.0.1:50051" in text


@pytest.mark.parametrize(
    ("argv", "prefix"),
    [
        (["version", "--x"], "protocol-py version: error: unrecognized arguments: --x"),
        (
            ["validate", "a.json", "b.json"],
            "protocol-py validate: error: unrecognized arguments: b.json",
        ),
        (
            ["cost", "--pricing", "p", "--usage", "u", "--zz"],
            "protocol-py cost: error: unrecognized arguments: --zz",
        ),
        (["describe", "extra"], "protocol-py describe: error: unrecognized arguments: extra"),
    ],
)
def test_leftover_arguments_are_reported_by_the_subcommand(
    argv: list[str], prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == prefix
    assert err.startswith(f"usage: protocol-py {argv[0]} ")


def test_top_level_usage_errors_still_name_the_program(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith("protocol-py: error: ")


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


@pytest.mark.parametrize("value", ["0", "-1", "-0.5"])
def test_a_server_timeout_of_zero_or_less_gets_one_message(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "--write-timeout", value])
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"protocol-py serve: error: argument --write-timeout: must be a number of seconds > 0, "
        f"got {value!r}"
    )
