"""The ``anthropic`` provider: Anthropic Messages API (``POST /v1/messages``, streaming)."""

from protocol_py.providers.anthropic.provider import (
    ANTHROPIC_VERSION,
    AnthropicProvider,
)

__all__ = [
    "ANTHROPIC_VERSION",
    "AnthropicProvider",
]
