"""The built-in offline provider ``reference``: deterministic, no network, every event kind.

:mod:`~protocol_py.providers.reference.provider` (the :class:`ReferenceProvider` and its
behaviour), :mod:`~protocol_py.providers.reference.models` (its three ModelSpecs),
:mod:`~protocol_py.providers.reference.tokenizer` (token counting) and
:mod:`~protocol_py.providers.reference.render` (Render payloads).
"""

from protocol_py.providers.reference.models import LARGE, MEDIUM, SMALL, reference_models
from protocol_py.providers.reference.provider import (
    CACHE_BYTES,
    CACHE_ENTRIES,
    CONFIG_SCHEMA,
    SIGNATURE_LOCATION,
    ReferenceProvider,
)
from protocol_py.providers.reference.render import (
    MARKDOWN_ESCAPE_CHUNK_CHARS,
    MAX_RENDER_CHARS,
    MAX_REPEAT_PAYLOAD_BYTES,
    markdown_escape,
)
from protocol_py.providers.reference.tokenizer import (
    PromptSegment,
    count_text_tokens,
    prompt_segments,
    tokenize,
)

__all__ = [
    "CACHE_BYTES",
    "CACHE_ENTRIES",
    "CONFIG_SCHEMA",
    "LARGE",
    "MARKDOWN_ESCAPE_CHUNK_CHARS",
    "MAX_RENDER_CHARS",
    "MAX_REPEAT_PAYLOAD_BYTES",
    "MEDIUM",
    "SIGNATURE_LOCATION",
    "SMALL",
    "PromptSegment",
    "ReferenceProvider",
    "count_text_tokens",
    "markdown_escape",
    "prompt_segments",
    "reference_models",
    "tokenize",
]
