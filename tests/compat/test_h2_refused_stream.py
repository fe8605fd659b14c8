"""A stream over SETTINGS_MAX_CONCURRENT_STREAMS is refused alone with RST_STREAM
REFUSED_STREAM, its header block decoded so that later blocks on the connection decode against
the same HPACK table (:mod:`protocol_py._compat.h2_refused_stream`; that the client and the
server install it is pinned by ``tests/compat/test_install.py``)."""

from __future__ import annotations

import types
from typing import Any

import h2.config
import h2.connection
import h2.events
import hpack
import pytest
from h2.errors import ErrorCodes
from h2.exceptions import ProtocolError
from h2.settings import SettingCodes
from hyperframe.frame import HeadersFrame

from protocol_py._compat import h2_refused_stream


def headers(path: str, note: str) -> list[tuple[str, str]]:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "127.0.0.1"),
        ("x-note", note),
    ]


def pair(limit: int) -> tuple[Any, Any]:
    """A client and a server h2 connection, the server advertising ``limit`` streams, with
    the settings exchanged and acknowledged."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    server = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
    )
    server.local_settings.max_concurrent_streams = limit
    client.initiate_connection()
    server.initiate_connection()
    for _ in range(2):
        server.receive_data(client.data_to_send())
        client.receive_data(server.data_to_send())
    assert server.local_settings.max_concurrent_streams == limit
    # a flooding client ignores the advertised limit
    client.remote_settings._settings[SettingCodes.MAX_CONCURRENT_STREAMS][0] = 1000
    return client, server


def test_the_stream_over_the_limit_is_refused_and_later_headers_still_decode() -> None:
    assert h2_refused_stream.install()
    client, server = pair(limit=2)
    for stream_id, note in ((1, "first"), (3, "second"), (5, "refused-only")):
        client.send_headers(stream_id, headers("/svc/A", note))
    events = server.receive_data(client.data_to_send())
    received = [e for e in events if isinstance(e, h2.events.RequestReceived)]
    assert [e.stream_id for e in received] == [1, 3]
    assert not any(getattr(e, "stream_id", None) == 5 for e in events)
    answer = client.receive_data(server.data_to_send())
    resets = [e for e in answer if isinstance(e, h2.events.StreamReset)]
    assert [(e.stream_id, e.error_code) for e in resets] == [(5, ErrorCodes.REFUSED_STREAM)]
    assert not any(isinstance(e, h2.events.ConnectionTerminated) for e in answer)

    # Free one slot; the next stream repeats the refused stream's header, which the client's
    # encoder now sends as an index into the dynamic table the refused block filled.
    server.send_headers(1, [(":status", "200")], end_stream=True)
    client.end_stream(1)
    client.receive_data(server.data_to_send())
    client.send_headers(7, headers("/svc/A", "refused-only"))
    events = server.receive_data(client.data_to_send())
    received = [e for e in events if isinstance(e, h2.events.RequestReceived)]
    assert [e.stream_id for e in received] == [7]
    assert ("x-note", "refused-only") in list(received[0].headers)


def test_data_on_refused_streams_is_ignored_and_gives_the_connection_window_back() -> None:
    assert h2_refused_stream.install()
    client, server = pair(limit=1)
    client.send_headers(1, headers("/svc/A", "a"))
    server.receive_data(client.data_to_send())
    # Five refused streams each send 30,000 bytes before they see the reset: 150,000 bytes
    # in all, more than the 65,535-byte connection window, so the client can only send them
    # if the server gives the refused streams' bytes back to the connection window.
    for stream_id in (3, 5, 7, 9, 11):
        client.send_headers(stream_id, headers("/svc/A", "b"))
        client.send_data(stream_id, b"x" * 15_000)
        client.send_data(stream_id, b"x" * 15_000)
        events = server.receive_data(client.data_to_send())
        assert [e for e in events if getattr(e, "stream_id", 0) == stream_id] == []
        answer = client.receive_data(server.data_to_send())
        assert [
            e.error_code
            for e in answer
            if isinstance(e, h2.events.StreamReset) and e.stream_id == stream_id
        ] == [ErrorCodes.REFUSED_STREAM], answer
        assert client.outbound_flow_control_window >= 30_000, stream_id
    # the admitted stream still works
    client.send_data(1, b"y" * 10, end_stream=True)
    events = server.receive_data(client.data_to_send())
    assert [(type(e), e.stream_id) for e in events] == [
        (h2.events.DataReceived, 1),
        (h2.events.StreamEnded, 1),
    ]


def test_a_stream_id_lower_than_one_seen_stays_a_connection_error() -> None:
    assert h2_refused_stream.install()
    client, server = pair(limit=1)
    client.send_headers(5, headers("/svc/A", "a"))
    server.receive_data(client.data_to_send())
    # over the limit and lower than stream 5: h2's stream ID rule wins (the client-side h2
    # would not send it, so the frame is built by hand)
    frame = HeadersFrame(3, data=hpack.Encoder().encode(headers("/svc/A", "b")))
    frame.flags.add("END_HEADERS")
    with pytest.raises(ProtocolError, match="3 is lower than 5"):
        server.receive_data(frame.serialize())


def test_h2_refused_stream_is_a_no_op_on_another_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    class H2Connection:  # an h2 release without the method it wraps
        pass

    monkeypatch.setattr(
        h2_refused_stream,
        "_connection",
        types.SimpleNamespace(H2Connection=H2Connection),
    )
    assert h2_refused_stream.install() is False
    assert "_receive_headers_frame" not in vars(H2Connection)
