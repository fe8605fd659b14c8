"""The kernel side of the protocol: a grpclib client, request builders and bulk stream reading."""

from protocol_py.client.client import (
    Completion,
    ModelClient,
    parse_address,
)

__all__ = [
    "Completion",
    "ModelClient",
    "parse_address",
]
