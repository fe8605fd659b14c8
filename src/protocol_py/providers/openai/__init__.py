"""OpenAI-compatible Chat Completions providers: ``openai`` (OpenAI, Azure-style gateways,"""

from protocol_py.providers.openai.provider import (
    DeepSeekProvider,
    OpenAIProvider,
)

__all__ = [
    "DeepSeekProvider",
    "OpenAIProvider",
]
