"""protocol-py: the model-provider plugin protocol (model.v1) and its reference implementation.

The generated message classes live in ``protocol_py_gen`` (``protocol_py_gen.model.v1``,
``protocol_py_gen.content.v1``, ``protocol_py_gen.common.v1``); this package holds the
handwritten layer around them. The names most programs need are importable from here::

    from protocol_py import Provider, ProviderError, serve          # plugin side
    from protocol_py import ModelClient, Conversation, route        # kernel side

They are loaded on first use, so ``import protocol_py`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from protocol_py import _moved
from protocol_py.version import PACKAGE_VERSION, PROTOCOL_VERSION

_moved.install()

if TYPE_CHECKING:
    from protocol_py.client.client import Completion, ModelClient
    from protocol_py.client.conversation import Conversation
    from protocol_py.errors import InvalidValueError, ProtocolError, ValidationError
    from protocol_py.provider import Provider, ProviderError
    from protocol_py.rules.accumulate import StreamAccumulator, accumulate
    from protocol_py.rules.cost import cost
    from protocol_py.rules.routing import route
    from protocol_py.server import ModelServer
    from protocol_py.server.serve import ServeError, serve, serve_async

_LAZY: dict[str, str] = {
    "Completion": "protocol_py.client.client",
    "Conversation": "protocol_py.client.conversation",
    "InvalidValueError": "protocol_py.errors",
    "ModelClient": "protocol_py.client.client",
    "ModelServer": "protocol_py.server",
    "ProtocolError": "protocol_py.errors",
    "Provider": "protocol_py.provider",
    "ProviderError": "protocol_py.provider",
    "ServeError": "protocol_py.server.serve",
    "StreamAccumulator": "protocol_py.rules.accumulate",
    "ValidationError": "protocol_py.errors",
    "accumulate": "protocol_py.rules.accumulate",
    "cost": "protocol_py.rules.cost",
    "route": "protocol_py.rules.routing",
    "serve": "protocol_py.server.serve",
    "serve_async": "protocol_py.server.serve",
}
"""Public name -> the module defining it (imported on first attribute access, PEP 562)."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'protocol_py' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public API (:data:`__all__`) and the module's dunder attributes: helpers imported
    for the package's own use (``importlib``, ``Any``, ...) are not part of it."""
    dunders = [name for name in globals() if name.startswith("__") and name.endswith("__")]
    return sorted({*__all__, *dunders})


__all__ = [
    "PACKAGE_VERSION",
    "PROTOCOL_VERSION",
    "Completion",
    "Conversation",
    "InvalidValueError",
    "ModelClient",
    "ModelServer",
    "ProtocolError",
    "Provider",
    "ProviderError",
    "ServeError",
    "StreamAccumulator",
    "ValidationError",
    "accumulate",
    "cost",
    "route",
    "serve",
    "serve_async",
]
