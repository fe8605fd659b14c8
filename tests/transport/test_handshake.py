"""The handshake line: positional ``|`` fields, the fifth an
optional base64 DER certificate (standard alphabet, no padding, as go-plugin), unknown trailing
fields ignored, a different first field refused; and the listening options behind it."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from protocol_py.errors import InvalidValueError
from protocol_py.transport.handshake import (
    MAX_HANDSHAKE_LINE_BYTES,
    format_handshake,
    parse_handshake,
)
from protocol_py.transport.listen import PRIVATE_DIR_PREFIX, listen_spec
from protocol_py.transport.tls import CLIENT_CERT_ENV, TLSConfigError, generate_certificate


def test_format_handshake_writes_the_four_fields_and_an_unpadded_certificate() -> None:
    assert format_handshake("tcp", "127.0.0.1:50051") == "1|tcp|127.0.0.1:50051|grpc\n"
    assert format_handshake("unix", "/tmp/x/plugin.sock") == "1|unix|/tmp/x/plugin.sock|grpc\n"
    der = bytes(range(255)) + b"\xfb\xff"  # 257 bytes: standard base64 ends in "+/8="
    line = format_handshake("unix", "/s", der)
    field = line.rstrip("\n").split("|")[4]
    assert base64.b64encode(der).decode().endswith("+/8=")
    assert field == base64.b64encode(der).decode()[:-1]
    assert field.endswith("+/8")


@pytest.mark.parametrize("padded", [False, True])
def test_parse_handshake_reads_the_certificate_padded_or_not(padded: bool) -> None:
    der = generate_certificate().cert_der
    text = base64.b64encode(der).decode()
    line = f"1|unix|/tmp/p/plugin.sock|grpc|{text if padded else text.rstrip('=')}\n"
    parsed = parse_handshake(line)
    assert parsed.server_certificate == der
    assert parsed.target == "unix:/tmp/p/plugin.sock"


def test_parse_handshake_ignores_fields_it_does_not_know() -> None:
    parsed = parse_handshake("1|tcp|127.0.0.1:7|grpc||future|more\n")
    assert (parsed.version, parsed.transport, parsed.address, parsed.protocol) == (
        1,
        "tcp",
        "127.0.0.1:7",
        "grpc",
    )
    assert parsed.server_certificate is None
    assert parsed.extra == ("future", "more")
    assert parsed.target == "127.0.0.1:7"


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        ("2|tcp|127.0.0.1:7|grpc\n", "handshake.version"),
        ("1|udp|127.0.0.1:7|grpc\n", "handshake.transport"),
        ("1|tcp|127.0.0.1:7|netrpc\n", "handshake.protocol"),
        ("1|tcp|127.0.0.1:7\n", "handshake.fields"),
        ("1|tcp|127.0.0.1:7|grpc|not*base64\n", "handshake.cert"),
        ("1|tcp|127.0.0.1:7|grpc|" + "A" * MAX_HANDSHAKE_LINE_BYTES, "handshake.length"),
        # only loopback TCP addresses, never an empty one.
        ("1|tcp|192.0.2.1:443|grpc\n", "handshake.address"),
        ("1|tcp|example.com:443|grpc\n", "handshake.address"),
        ("1|tcp|[2001:db8::1]:443|grpc\n", "handshake.address"),
        ("1|tcp||grpc\n", "handshake.address"),
        ("1|tcp|127.0.0.1|grpc\n", "handshake.address"),
        ("1|tcp|127.0.0.1:0|grpc\n", "handshake.address"),
        ("1|unix||grpc\n", "handshake.address"),
        ("1|unix|relative.sock|grpc\n", "handshake.address"),
    ],
)
def test_parse_handshake_refuses_what_it_cannot_trust(line: str, rule: str) -> None:
    with pytest.raises(InvalidValueError) as info:
        parse_handshake(line)
    assert info.value.rule == rule
    assert len(str(info.value)) < 400


def test_format_handshake_refuses_a_separator_in_the_address() -> None:
    with pytest.raises(InvalidValueError, match=r"may not contain '\|'"):
        format_handshake("unix", "/tmp/a|b")


def test_listen_spec_chooses_the_transport_from_the_options(tmp_path: Path) -> None:
    plain = listen_spec(host=None, port=None, socket=None, handshake=False, env={})
    assert (plain.host, plain.port, plain.path, plain.ssl) == ("127.0.0.1", 50051, None, None)
    tcp = listen_spec(host=None, port=0, socket=None, handshake=True, env={})
    assert (tcp.host, tcp.port, tcp.path) == ("127.0.0.1", 0, None)
    private = listen_spec(host=None, port=None, socket=None, handshake=True, env={})
    try:
        assert private.path is not None and private.owns_socket_dir
        assert Path(private.path).parent.name.startswith(PRIVATE_DIR_PREFIX)
        assert (Path(private.path).parent.stat().st_mode & 0o777) == 0o700
    finally:
        private.discard()
    assert private.path is not None and not Path(private.path).parent.exists()
    explicit = listen_spec(host=None, port=None, socket=str(tmp_path / "s"), handshake=True, env={})
    assert explicit.path == str(tmp_path / "s") and not explicit.owns_socket_dir
    relative = listen_spec(host=None, port=None, socket="rel.sock", handshake=True, env={})
    assert relative.path == os.path.join(os.getcwd(), "rel.sock")


def test_listen_spec_auto_mtls_needs_the_handshake_and_excludes_tls_files() -> None:
    pem = generate_certificate().cert_pem.decode()
    auto = listen_spec(host=None, port=0, socket=None, handshake=True, env={CLIENT_CERT_ENV: pem})
    assert auto.ssl is not None and auto.server_certificate is not None
    ignored = listen_spec(
        host=None, port=0, socket=None, handshake=False, env={CLIENT_CERT_ENV: pem}
    )
    assert ignored.ssl is None and ignored.server_certificate is None
    with pytest.raises(TLSConfigError, match="--tls-cert and --tls-key must be given together"):
        listen_spec(host=None, port=0, socket=None, handshake=False, tls_cert="c", env={})
    with pytest.raises(TLSConfigError, match="--tls-client-ca needs --tls-cert and --tls-key"):
        listen_spec(host=None, port=0, socket=None, handshake=False, tls_client_ca="c", env={})
    with pytest.raises(InvalidValueError, match=r"invalid --port 65536: must be in 0..65535"):
        listen_spec(host=None, port=65536, socket=None, handshake=False, env={})


@pytest.mark.parametrize("address", ["127.0.0.1:7", "127.3.2.1:7", "[::1]:7", "localhost:7"])
def test_parse_handshake_accepts_loopback_tcp_addresses(address: str) -> None:
    assert parse_handshake(f"1|tcp|{address}|grpc\n").address == address


def test_parse_handshake_names_the_address_field_and_cuts_the_value() -> None:
    with pytest.raises(InvalidValueError) as info:
        parse_handshake("1|tcp|" + "h" * 5000 + ".example:443|grpc\n")
    message = str(info.value)
    assert message.startswith("handshake address (field 3): a plugin must listen on loopback")
    assert len(message) < 400
