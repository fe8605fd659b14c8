"""hashicorp/go-plugin's handshake (protocol_py.transport.go_plugin): what its variables mean
to the plugin, the line the plugin prints, and the kernel side reading both layouts."""

from __future__ import annotations

import base64
import os
import socket
from pathlib import Path

import pytest

from protocol_py.errors import InvalidValueError
from protocol_py.transport.go_plugin import (
    GO_PLUGIN_ENV,
    MAGIC_COOKIE_KEY,
    MAGIC_COOKIE_VALUE,
    MAX_ENV_VALUE_CHARS,
    GoPluginLaunch,
    NotLaunchedByKernelError,
    free_port,
    go_plugin_launch,
    parse_handshake_line,
    socket_path_in,
)
from protocol_py.transport.handshake import MAX_HANDSHAKE_LINE_BYTES, format_handshake
from protocol_py.transport.tls import generate_certificate

COOKIE = {MAGIC_COOKIE_KEY: MAGIC_COOKIE_VALUE}


class _Server:
    """The two attributes handshake_line reads from a started server."""

    def __init__(self, socket_path: str | None = None, address: str = "") -> None:
        self.socket_path = socket_path
        self.address = address


def test_without_go_plugin_variables_the_plugin_keeps_its_own_layout() -> None:
    assert go_plugin_launch({}) is None
    assert go_plugin_launch({"PLUGIN_CLIENT_CERT": "x", "PLUGIN_MIN_PORT": "1"}) is None


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"PLUGIN_PROTOCOL_VERSIONS": "1"}, f"{MAGIC_COOKIE_KEY} is not set"),
        (
            {"PLUGIN_PROTOCOL_VERSIONS": "1", MAGIC_COOKIE_KEY: "terraform"},
            f"{MAGIC_COOKIE_KEY} is not 'model.v1.ModelService'",
        ),
        ({MAGIC_COOKIE_KEY: ""}, f"{MAGIC_COOKIE_KEY} is not 'model.v1.ModelService'"),
    ],
)
def test_go_plugin_mode_without_the_cookie_says_this_is_a_plugin(
    env: dict[str, str], problem: str
) -> None:
    with pytest.raises(NotLaunchedByKernelError) as caught:
        go_plugin_launch(env)
    message = str(caught.value)
    assert message.startswith("this program is a model-provider plugin: a kernel starts it")
    assert problem in message
    assert "terraform" not in message  # the wrong value is not echoed


@pytest.mark.parametrize(
    ("versions", "kernel", "app", "shared"),
    [
        ("1", (1,), 1, (1,)),
        ("3,1,2", (3, 1, 2), 1, (1,)),
        (" 1 , 5", (1, 5), 1, (1,)),
        ("2,3", (2, 3), 1, ()),  # none shared: our own major, which the kernel refuses
        ("", (), 1, ()),
    ],
)
def test_app_version_is_the_highest_shared_major(
    versions: str, kernel: tuple[int, ...], app: int, shared: tuple[int, ...]
) -> None:
    launch = go_plugin_launch({**COOKIE, "PLUGIN_PROTOCOL_VERSIONS": versions})
    assert launch is not None
    assert launch.kernel_versions == kernel
    assert launch.app_version == app
    assert launch.shared_versions == shared


@pytest.mark.parametrize(
    ("env", "rule", "text"),
    [
        (
            {"PLUGIN_PROTOCOL_VERSIONS": "1,x"},
            "go_plugin.versions",
            "PLUGIN_PROTOCOL_VERSIONS: 'x'",
        ),
        (
            {"PLUGIN_PROTOCOL_VERSIONS": "1,,2"},
            "go_plugin.versions",
            "PLUGIN_PROTOCOL_VERSIONS: ''",
        ),
        ({"PLUGIN_PROTOCOL_VERSIONS": "\u0661"}, "go_plugin.versions", "is not a version"),
        ({"PLUGIN_MIN_PORT": "70000"}, "go_plugin.port", "PLUGIN_MIN_PORT: '70000' is not a port"),
        ({"PLUGIN_MAX_PORT": "-1"}, "go_plugin.port", "PLUGIN_MAX_PORT: '-1' is not a port"),
        (
            {"PLUGIN_MIN_PORT": "2000", "PLUGIN_MAX_PORT": "1000"},
            "go_plugin.port",
            "PLUGIN_MIN_PORT 2000 is above PLUGIN_MAX_PORT 1000",
        ),
        (
            {"PLUGIN_UNIX_SOCKET_GROUP": "kernels"},
            "go_plugin.socket_group",
            "PLUGIN_UNIX_SOCKET_GROUP is not supported",
        ),
        (
            {"PLUGIN_UNIX_SOCKET_DIR": "/x" * MAX_ENV_VALUE_CHARS},
            "go_plugin.env.length",
            f"PLUGIN_UNIX_SOCKET_DIR: {2 * MAX_ENV_VALUE_CHARS} characters, more than",
        ),
    ],
)
def test_malformed_variables_are_refused_naming_the_variable(
    env: dict[str, str], rule: str, text: str
) -> None:
    with pytest.raises(InvalidValueError) as caught:
        go_plugin_launch({**COOKIE, **env})
    assert caught.value.rule == rule
    assert text in str(caught.value)


def test_ports_socket_dir_and_multiplex_are_read() -> None:
    launch = go_plugin_launch(
        {
            **COOKIE,
            "PLUGIN_MIN_PORT": "10000",
            "PLUGIN_MAX_PORT": "25000",
            "PLUGIN_UNIX_SOCKET_DIR": "/run/kernel",
            "PLUGIN_MULTIPLEX_GRPC": "true",
        }
    )
    assert launch == GoPluginLaunch(
        kernel_versions=(), socket_dir="/run/kernel", port_range=(10000, 25000), multiplex=True
    )


def test_launch_removes_every_variable_go_plugin_sets() -> None:
    assert set(GO_PLUGIN_ENV) == {
        "MODEL_PLUGIN_MAGIC_COOKIE",
        "PLUGIN_PROTOCOL_VERSIONS",
        "PLUGIN_CLIENT_CERT",
        "PLUGIN_UNIX_SOCKET_DIR",
        "PLUGIN_UNIX_SOCKET_GROUP",
        "PLUGIN_MIN_PORT",
        "PLUGIN_MAX_PORT",
        "PLUGIN_MULTIPLEX_GRPC",
    }


def test_the_line_has_go_plugins_six_fields() -> None:
    launch = GoPluginLaunch(kernel_versions=(1,))
    assert launch.handshake_line(_Server("/tmp/d/plugin.sock")) == (
        "1|1|unix|/tmp/d/plugin.sock|grpc|\n"
    )
    der = generate_certificate().cert_der
    line = launch.handshake_line(_Server(address="127.0.0.1:10001"), der)
    core, app, network, address, protocol, cert = line.rstrip("\n").split("|")
    assert (core, app, network, address, protocol) == ("1", "1", "tcp", "127.0.0.1:10001", "grpc")
    assert "=" not in cert
    assert base64.b64decode(cert + "=" * (-len(cert) % 4)) == der
    assert len(cert) > 50  # go-plugin ignores a sixth field of 50 characters or fewer


def test_a_kernel_asking_for_broker_multiplexing_gets_false() -> None:
    line = GoPluginLaunch(kernel_versions=(1,), multiplex=True).handshake_line(
        _Server("/tmp/d/plugin.sock")
    )
    assert line == "1|1|unix|/tmp/d/plugin.sock|grpc||false\n"


def test_listen_options(tmp_path: Path) -> None:
    launch = GoPluginLaunch(socket_dir=str(tmp_path), port_range=(0, 0))
    host, port, path = launch.listen_options(host=None, port=None, socket=None)
    assert (host, port) == (None, None)
    assert path is not None and os.path.dirname(path) == str(tmp_path)
    assert os.path.basename(path).startswith("plugin-") and path.endswith(".sock")
    assert launch.listen_options(host="127.0.0.1", port=None, socket=None) == ("127.0.0.1", 0, None)
    assert launch.listen_options(host="127.0.0.1", port=5, socket=None) == ("127.0.0.1", 5, None)
    assert launch.listen_options(host=None, port=None, socket="/s") == (None, None, "/s")
    no_dir = GoPluginLaunch()
    assert no_dir.listen_options(host=None, port=None, socket=None) == (None, None, None)


def test_socket_path_in_refuses_what_cannot_be_used(tmp_path: Path) -> None:
    first, second = socket_path_in(str(tmp_path)), socket_path_in(str(tmp_path))
    assert first != second
    with pytest.raises(InvalidValueError, match=r"PLUGIN_UNIX_SOCKET_DIR: .* is not a directory"):
        socket_path_in(str(tmp_path / "missing"))
    with pytest.raises(InvalidValueError, match="cannot be announced"):
        socket_path_in(str(tmp_path / "a|b"))
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    with pytest.raises(InvalidValueError, match="more than the 107"):
        socket_path_in(str(deep))


def test_free_port_takes_the_first_free_port_of_the_range() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        chosen = free_port("127.0.0.1", port, min(port + 50, 65535))
        assert port < chosen <= port + 50
        with pytest.raises(InvalidValueError, match=f"no free TCP port .* \\({port}..{port}\\)"):
            free_port("127.0.0.1", port, port)
    assert free_port("127.0.0.1", 0, 0) == 0


# -- the kernel side: both layouts ----------------------------------------------------------


def test_both_layouts_parse_to_the_same_address() -> None:
    der = generate_certificate().cert_der
    ours = parse_handshake_line(format_handshake("unix", "/tmp/d/plugin.sock", der))
    theirs = parse_handshake_line(
        GoPluginLaunch(kernel_versions=(1,)).handshake_line(_Server("/tmp/d/plugin.sock"), der)
    )
    assert (ours.layout, theirs.layout) == ("protocol-py", "go-plugin")
    for parsed in (ours, theirs):
        assert (parsed.version, parsed.transport, parsed.target) == (
            1,
            "unix",
            "unix:/tmp/d/plugin.sock",
        )
        assert parsed.server_certificate == der
    plain = parse_handshake_line("1|1|tcp|127.0.0.1:10000|grpc|\n")
    assert (plain.target, plain.server_certificate, plain.extra) == ("127.0.0.1:10000", None, ())
    assert parse_handshake_line("1|1|tcp|127.0.0.1:10000|grpc||false").extra == ("false",)
    assert parse_handshake_line("1|1|tcp|127.0.0.1:10000|grpc").server_certificate is None


@pytest.mark.parametrize(
    ("line", "rule", "text"),
    [
        ("1|1|unix|/p", "handshake.fields", "go-plugin handshake line has 4 fields"),
        ("2|1|unix|/p|grpc|", "handshake.core", "go-plugin core protocol (field 1) '2' is not 1"),
        ("1|2|unix|/p|grpc|", "handshake.version", "protocol version (field 2) '2' is not 1"),
        ("1|1|udp|/p|grpc|", "handshake.transport", "transport (field 3) 'udp'"),
        ("1|1|unix|p.sock|grpc|", "handshake.address", "address (field 4): a unix socket must"),
        ("1|1|tcp|10.1.2.3:99|grpc|", "handshake.address", "address (field 4): a plugin must"),
        ("1|1|tcp|127.0.0.1:99|netrpc|", "handshake.protocol", "protocol (field 5) 'netrpc'"),
        ("1|1|tcp|127.0.0.1:99|grpc|!!!", "handshake.cert", "not standard base64"),
        ("1|unix|/p|grpc|!!!", "handshake.cert", "not standard base64"),
        ("x" * (MAX_HANDSHAKE_LINE_BYTES + 1), "handshake.length", "longer than 16384 bytes"),
    ],
)
def test_a_bad_line_of_either_layout_names_the_field(line: str, rule: str, text: str) -> None:
    with pytest.raises(InvalidValueError) as caught:
        parse_handshake_line(line)
    assert caught.value.rule == rule
    assert text in str(caught.value)
