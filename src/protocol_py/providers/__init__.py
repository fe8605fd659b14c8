"""Providers, looked up by name (``protocol-py serve --provider NAME``).

:func:`load_provider_class` resolves, in this order: a built-in name (:data:`BUILTIN`), the
name of an installed entry point in the group :data:`ENTRY_POINT_GROUP`, ``module:Class`` (an
importable module) and ``path/to/file.py:Class`` (a source file). A package registers its
provider in its ``pyproject.toml``::

    [project.entry-points."protocol_py.providers"]
    acme = "acme_models.provider:AcmeProvider"

Modules are imported lazily so that the offline ``reference`` provider never imports HTTP code.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path
from typing import Final

from protocol_py.errors import ProtocolError
from protocol_py.provider import Provider

__all__ = [
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "MAX_SPEC_CHARS",
    "ProviderLoadError",
    "installed_providers",
    "load_provider_class",
    "provider_class",
]

BUILTIN: Final[dict[str, str]] = {
    "reference": "protocol_py.providers.reference.provider:ReferenceProvider",
    "openai": "protocol_py.providers.openai.provider:OpenAIProvider",
    "deepseek": "protocol_py.providers.openai.provider:DeepSeekProvider",
    "anthropic": "protocol_py.providers.anthropic.provider:AnthropicProvider",
    "gemini": "protocol_py.providers.gemini.provider:GeminiProvider",
    "vertex": "protocol_py.providers.gemini.provider:VertexProvider",
}
"""Built-in provider names and the ``module:Class`` implementing each."""

ENTRY_POINT_GROUP: Final = "protocol_py.providers"
"""The entry-point group installed packages register their Provider classes under."""

MAX_SPEC_CHARS: Final = 200
"""Longest ``--provider`` value quoted back in an error message, characters."""


class ProviderLoadError(ProtocolError, ValueError):
    """A provider could not be found or loaded: unknown name, missing module or file, missing
    class, or an object that is not a Provider subclass. The message names which."""


def installed_providers() -> dict[str, str]:
    """Entry points of the group :data:`ENTRY_POINT_GROUP`: name -> ``module:attr``."""
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _quote(text: str) -> str:
    return repr(text if len(text) <= MAX_SPEC_CHARS else text[:MAX_SPEC_CHARS] + "...")


def _checked(obj: object, what: str) -> type[Provider]:
    if not (isinstance(obj, type) and issubclass(obj, Provider)):
        kind = f"class {obj.__qualname__}" if isinstance(obj, type) else type(obj).__name__
        raise ProviderLoadError(
            f"{what} is not a protocol_py.Provider subclass (it is a {kind[:80]})"
        )
    return obj


def _import_file(path_text: str) -> object:
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise ProviderLoadError(f"provider file {_quote(path_text)} not found")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    name = f"_protocol_py_provider_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ProviderLoadError(f"provider file {_quote(path_text)} is not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _import_target(target: str, what: str) -> type[Provider]:
    """``module:attr`` or ``file.py:attr`` -> the checked class."""
    location, colon, attr = target.rpartition(":")
    if not colon or not location or not attr:
        raise ProviderLoadError(f"{what}: expected module:Class or path/to/file.py:Class")
    if location.endswith(".py") or "/" in location or "\\" in location:
        module: object = _import_file(location)
    else:
        try:
            module = importlib.import_module(location)
        except ModuleNotFoundError as exc:
            missing = exc.name or location
            if missing != location and not location.startswith(missing + "."):
                raise ProviderLoadError(
                    f"{what}: no module named {_quote(missing)} (imported by {_quote(location)})"
                ) from None
            raise ProviderLoadError(
                f"{what}: no module named {_quote(missing)}: the module must be importable (on "
                "sys.path, e.g. via PYTHONPATH, or installed); for a source file give "
                f"path/to/file.py:Class (e.g. ./{location.replace('.', '/')[:MAX_SPEC_CHARS]}.py:"
                f"{attr[:MAX_SPEC_CHARS]})"
            ) from None
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ProviderLoadError(
                f"{what}: {_quote(location)} has no attribute {_quote(attr)}"
            ) from None
    return _checked(obj, f"{what}: {attr[:MAX_SPEC_CHARS]}")


def load_provider_class(spec: str) -> type[Provider]:
    """Resolve ``--provider``: a built-in name, an installed entry-point name, ``module:Class``
    or ``path/to/file.py:Class``.

    Raises:
        ProviderLoadError: unknown name (the message lists the built-in and installed ones), a
            module or file that does not exist, a missing attribute, or an object that is not a
            :class:`~protocol_py.provider.Provider` subclass.
        Exception: whatever importing the provider's module raises (a bug in that module).
    """
    if spec in BUILTIN:
        return provider_class(spec)
    installed = installed_providers()
    if spec in installed:
        return _import_target(installed[spec], f"provider {spec!r} ({installed[spec]})")
    if ":" in spec:
        return _import_target(spec, f"provider {_quote(spec)}")
    known = ", ".join(sorted(BUILTIN))
    extra = f"; installed: {', '.join(sorted(installed))}" if installed else ""
    raise ProviderLoadError(
        f"unknown provider {_quote(spec)}; built-in providers: {known}{extra}; "
        "or give module:Class or path/to/file.py:Class"
    )


def provider_class(name: str) -> type[Provider]:
    """Return the class of the built-in provider ``name``.

    Raises:
        KeyError is never raised; an unknown name raises ValueError listing the known names.
    """
    try:
        target = BUILTIN[name]
    except KeyError:
        known = ", ".join(sorted(BUILTIN))
        raise ValueError(f"unknown provider {name!r}; built-in providers: {known}") from None
    module_name, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    if not (isinstance(cls, type) and issubclass(cls, Provider)):
        raise TypeError(f"{target} is not a Provider subclass")
    return cls
