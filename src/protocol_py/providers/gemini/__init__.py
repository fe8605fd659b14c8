"""The ``gemini`` (Gemini API) and ``vertex`` (Vertex AI) providers: native
``streamGenerateContent``, thought signatures replayed on the part they came from, implicit and
explicit (``cachedContents``) caching, exact usage (docs/adapters.md "Gemini")."""

from protocol_py.providers.gemini.provider import GeminiProvider, VertexProvider

__all__ = ["GeminiProvider", "VertexProvider"]
