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
    CACHE_ENTRY_OVERHEAD_BYTES,
    CONFIG_SCHEMA,
    FRAGMENT_CHARS,
    MAX_EXAMPLE_STRING_CHARS,
    SIGNATURE_LOCATION,
    SIGNED_CALL_PREFIX,
    TOKENS_PER_DELTA,
    ReferenceProvider,
)
from protocol_py.providers.reference.render import (
    MARKDOWN_ESCAPE_CHUNK_CHARS,
    MAX_RENDER_CHARS,
    MAX_REPEAT_PAYLOAD_BYTES,
    markdown_escape,
)
from protocol_py.providers.reference.tokenizer import (
    TOKEN_COUNT_CHUNK_CHARS,
    PromptSegment,
    count_parts_tokens,
    count_text_tokens,
    prompt_segments,
    tokenize,
)

__all__ = [
    "CACHE_BYTES",
    "CACHE_ENTRIES",
    "CACHE_ENTRY_OVERHEAD_BYTES",
    "CONFIG_SCHEMA",
    "FRAGMENT_CHARS",
    "LARGE",
    "MARKDOWN_ESCAPE_CHUNK_CHARS",
    "MAX_EXAMPLE_STRING_CHARS",
    "MAX_RENDER_CHARS",
    "MAX_REPEAT_PAYLOAD_BYTES",
    "MEDIUM",
    "SIGNATURE_LOCATION",
    "SIGNED_CALL_PREFIX",
    "SMALL",
    "TOKENS_PER_DELTA",
    "TOKEN_COUNT_CHUNK_CHARS",
    "PromptSegment",
    "ReferenceProvider",
    "count_parts_tokens",
    "count_text_tokens",
    "markdown_escape",
    "prompt_segments",
    "reference_models",
    "tokenize",
]
"""The public names of the 1.1 module ``protocol_py.providers.reference``, each defined in the
submodule of its concern."""
