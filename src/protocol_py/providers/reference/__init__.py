"""The built-in offline provider ``reference``: deterministic, no network, every event kind."""

from protocol_py.providers.reference.provider import (
    LARGE,
    MEDIUM,
    SMALL,
    ReferenceProvider,
    count_text_tokens,
    reference_models,
    tokenize,
)

__all__ = [
    "LARGE",
    "MEDIUM",
    "SMALL",
    "ReferenceProvider",
    "count_text_tokens",
    "reference_models",
    "tokenize",
]
