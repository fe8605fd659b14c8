"""Module paths of protocol-py 1.0 and 1.1 that moved into role subpackages in 1.2.

Each old path still imports, as a module that re-exports the public names (``__all__``) of
the modules that now hold them, and warns once with :class:`DeprecationWarning`. The old
paths are removed in 2.0 (CHANGELOG, "Deprecated"). The table :data:`MOVED` is the whole list.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence
from typing import Any, Final

MOVED: Final[dict[str, tuple[str, ...]]] = {
    "protocol_py.accumulate": ("protocol_py.rules.accumulate", "protocol_py.rules.stream_order"),
    "protocol_py.validation": (
        "protocol_py.rules.capabilities",
        "protocol_py.rules.request",
        "protocol_py.rules.documents",
        "protocol_py.rules.json_schema",
    ),
    "protocol_py.validation_memo": ("protocol_py.rules.request_memo",),
    "protocol_py.pricing": (
        "protocol_py.rules.pricing",
        "protocol_py.rules.cost",
        "protocol_py.rules.timestamps",
    ),
    "protocol_py.pricing_windows": ("protocol_py.rules.pricing_windows",),
    "protocol_py.routing": ("protocol_py.rules.routing",),
    "protocol_py.replay": ("protocol_py.rules.replay",),
    "protocol_py.vendor_data": ("protocol_py.rules.vendor_data",),
    "protocol_py.wire": ("protocol_py.codec.wire",),
    "protocol_py.prefix_memo": ("protocol_py.codec.prefixes",),
    "protocol_py.protojson": ("protocol_py.codec.protojson", "protocol_py.codec.type_check"),
    "protocol_py.structs": ("protocol_py.codec.structs",),
    "protocol_py.tls": ("protocol_py.transport.tls",),
    "protocol_py.launch": ("protocol_py.transport.launch",),
    "protocol_py.serving": ("protocol_py.server.serve",),
    "protocol_py.offload": ("protocol_py.server.offload",),
    "protocol_py.sse": ("protocol_py.providers.http.sse",),
    "protocol_py.conversation": ("protocol_py.client.conversation",),
    "protocol_py.message_reader": ("protocol_py.client.message_reader",),
    "protocol_py.chat": ("protocol_py.cli.chat",),
    "protocol_py.server.admission": ("protocol_py.server.grpc_layer.admission",),
    "protocol_py.server.cardinality": ("protocol_py.server.grpc_layer.cardinality",),
    "protocol_py.server.connections": ("protocol_py.server.grpc_layer.connections",),
    "protocol_py.server.limits": ("protocol_py.server.grpc_layer.limits",),
    "protocol_py.server.large_body": ("protocol_py.server.grpc_layer.large_body",),
    "protocol_py.server.strict_parse": ("protocol_py.server.grpc_layer.strict_parse",),
    "protocol_py.server.batching": ("protocol_py.server.grpc_layer.batching",),
    "protocol_py.server.reply_budget": ("protocol_py.server.grpc_layer.reply_budget",),
}
"""Old module path -> the modules whose public names it re-exports, in lookup order."""


def public_names(module: types.ModuleType) -> list[str]:
    """``module.__all__``, or its names without a leading underscore when it has none."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [name for name in vars(module) if not name.startswith("_")]
    return list(names)


class _MovedModuleLoader(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of :data:`MOVED` and builds their re-export modules."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        targets = [importlib.import_module(name) for name in MOVED[module.__name__]]
        exported: list[str] = []
        for target in targets:
            for name in public_names(target):
                if name not in exported:
                    exported.append(name)
                    setattr(module, name, getattr(target, name))
        module.__all__ = exported  # type: ignore[attr-defined]
        module.__doc__ = (
            f"Deprecated alias of {', '.join(MOVED[module.__name__])} (removed in 2.0)."
        )

        def __getattr__(name: str) -> Any:  # noqa: N807 - PEP 562 module hook
            for target in targets:
                if hasattr(target, name):
                    return getattr(target, name)
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        warnings.warn(
            f"{module.__name__} is deprecated; import from "
            f"{' or '.join(MOVED[module.__name__])} (the old path is removed in 2.0)",
            DeprecationWarning,
            stacklevel=2,
        )


_FINDER: Final = _MovedModuleLoader()


def install() -> None:
    """Put the finder of the old paths on :data:`sys.meta_path` (idempotent)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
