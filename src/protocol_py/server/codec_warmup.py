"""Build the fast codec's generated functions before the server serves:
:mod:`protocol_py.codec.wire` compiles each class's decoder and encoder on first use, which
would otherwise take tens of milliseconds of the event loop inside a fresh server's first call."""

from __future__ import annotations

from typing import Final

import betterproto2

from protocol_py.codec.wire_gen import GENERATOR
from protocol_py.server.grpc_layer.limits import REQUEST_TYPES
from protocol_py_gen.content.v1 import ContentBlock, Message
from protocol_py_gen.model.v1 import (
    ConfigureResponse,
    CountTokensResponse,
    DescribeResponse,
    GetCapabilitiesResponse,
    RenderResponse,
    StreamEvent,
)

REPLY_TYPES: Final[tuple[type[betterproto2.Message], ...]] = (
    GetCapabilitiesResponse,
    ConfigureResponse,
    StreamEvent,
    CountTokensResponse,
    RenderResponse,
    DescribeResponse,
)
"""The ModelService reply messages (package ``model.v1``) the server encodes."""

ELEMENT_TYPES: Final[tuple[type[betterproto2.Message], ...]] = (Message, ContentBlock)
"""Messages decoded on their own as well as inside a request: a conversation's messages and
their content blocks, one at a time by the decode memo (:mod:`protocol_py.codec.decode_memo`)."""


def build_codecs() -> None:
    """Generate and compile the decoders of
    :data:`~protocol_py.server.grpc_layer.limits.REQUEST_TYPES` and of :data:`ELEMENT_TYPES`,
    and the encoders of those requests and of :data:`REPLY_TYPES` (requests are encoded too:
    cache and memo keys), with every class they contain; idempotent and thread-safe (CPU work
    of tens of milliseconds: call it off the event loop)."""
    for kind in REQUEST_TYPES:
        GENERATOR.decoder(kind)
        GENERATOR.encoder(kind)
    for kind in REPLY_TYPES:
        GENERATOR.encoder(kind)
    for kind in ELEMENT_TYPES:
        GENERATOR.decoder(kind)
