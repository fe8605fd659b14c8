"""Built-in providers, looked up by name (``protocol-py serve --provider NAME``).

Modules are imported lazily so that the offline ``reference`` provider never imports HTTP code.
"""

from __future__ import annotations

import importlib
from typing import Final

from protocol_py.provider import Provider

BUILTIN: Final[dict[str, str]] = {
    "reference": "protocol_py.providers.reference:ReferenceProvider",
    "openai": "protocol_py.providers.openai:OpenAIProvider",
    "deepseek": "protocol_py.providers.openai:DeepSeekProvider",
    "anthropic": "protocol_py.providers.anthropic:AnthropicProvider",
}
"""Built-in provider names and the ``module:Class`` implementing each."""


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
