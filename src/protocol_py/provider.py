"""The base class plugin authors subclass to serve ModelService (the provider contract).

A :class:`Provider` is what the reference server adapter (:mod:`protocol_py.server`) serves. The
adapter owns everything generic: capability validation at start-up, request validation before
the provider is called, Configure's JSON Schema check, event-order checking (docs/decisions.md#d12),
exception classification and cancellation. A provider only translates.

Methods a provider does not override answer gRPC ``UNIMPLEMENTED``.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping
from typing import Any

from protocol_py.errors import ProtocolError
from protocol_py.version import PROTOCOL_VERSION
from protocol_py_gen.common.v1 import CallContext, PluginCategory, ProducerRef
from protocol_py_gen.model.v1 import (
    Capabilities,
    CountTokensRequest,
    CountTokensResponse,
    ModelError,
    RenderRequest,
    RenderResponse,
    StreamCompletionRequest,
    StreamEvent,
)

JSONValue = Any
"""A parsed JSON value (``dict``/``list``/``str``/``int``/``float``/``bool``/``None``)."""


class NotImplementedRPC(Exception):  # noqa: N818 - it names the gRPC status it becomes
    """Raised by a provider method that is not implemented; the server answers UNIMPLEMENTED."""


class ProviderError(Exception):
    """A classified failure a provider raises from :meth:`Provider.stream` (or before it).

    The server ends the stream with exactly this ``ModelError`` as the final ``error`` event,
    keeping every event already sent. Any other exception is classified by the server
    (TRANSIENT for network and timeout errors, PERMANENT otherwise).
    """

    def __init__(self, error: ModelError) -> None:
        super().__init__(f"{error.kind.name}: {error.message}")
        self.error = error


class ProviderStartError(ProtocolError):
    """:meth:`Provider.start` cannot get the provider ready (for example ``--discover`` cannot
    reach the upstream). :func:`protocol_py.serve` refuses to start with this message
    (:class:`~protocol_py.server.serve.ServeError`; ``protocol-py serve`` exits 1); it must be one
    line and hold no secret."""


class Provider(abc.ABC):
    """A model provider: the vendor-specific half of a ModelService plugin.

    Class attributes:
        name: The provider's declared name (``ProducerRef.name``), for example ``"reference"``;
            default: the class name.
        version: The provider build's version (semver).
        source: Where the build comes from (registry source address or path); may be empty.
    """

    name: str = "provider"
    version: str = "0.0.0"
    source: str = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that declares no ``name`` (neither itself nor a base other than
        Provider) is named after its class, so Describe, logs and errors name it."""
        super().__init_subclass__(**kwargs)
        if cls.name == Provider.name and "name" not in cls.__dict__:
            cls.name = cls.__name__

    def describe(self) -> ProducerRef:
        """Return this build's identity with the protocol version (spec: "Describe")."""
        return ProducerRef(
            name=self.name,
            version=self.version,
            source=self.source,
            category=PluginCategory.MODEL,
            protocol_version=PROTOCOL_VERSION,
        )

    @abc.abstractmethod
    def capabilities(self) -> Capabilities:
        """Return the provider's Capabilities: models, hook points and config schema.

        The server fills in ``protocol_version`` and validates the result at start-up; it refuses
        to start when any rule is broken.
        """

    def config_schema(self) -> Mapping[str, JSONValue] | None:
        """Return the JSON Schema (draft 2020-12) Configure's config must satisfy, or None.

        The default is the ``config_schema`` of :meth:`capabilities`, as parsed JSON.
        """
        return None

    async def configure(self, config: Mapping[str, JSONValue]) -> None:
        """Apply a configuration that already passed the config schema.

        Raise :class:`ValueError` to reject it (the server answers INVALID_ARGUMENT and the
        previous configuration stays in force). The default accepts an empty configuration only.
        """
        if config:
            raise ValueError("this provider takes no configuration")

    @abc.abstractmethod
    def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        """Run one completion, yielding StreamEvents in protocol order (docs/decisions.md#d12).

        The request has already been validated against the requested model's ModelSpec. It is
        read only: the server shares decoded content blocks between requests that carry the
        same message content (docs/decisions.md#d37), so never change it in place. Raise
        :class:`ProviderError` for a classified failure. On cancellation the iterator is closed
        (``GeneratorExit``/``CancelledError``): close upstream I/O in ``finally`` and re-raise.
        """

    def count_input_tokens(self, request: StreamCompletionRequest) -> int | None:
        """The input tokens of a validated StreamCompletion request, or None (cannot count).

        Called by the server before :meth:`stream` (docs/decisions.md#d25): a count above the
        model's ``context_window`` ends the stream with one CONTEXT_OVERFLOW error and the provider
        is never called. Synchronous and CPU-bound by design, so the server may run it off the
        event loop. Use the same method as :meth:`count_tokens` (exact tokenizer or the documented
        estimate). Default: None (no check).
        """
        return None

    def count_input_tokens_bounded(
        self, request: StreamCompletionRequest, bound: int
    ) -> tuple[int, bool] | None:
        """``(count, whole)`` for the server's context-window check, or None (cannot count).

        ``whole`` True: ``count`` is :meth:`count_input_tokens`' answer. ``whole`` False: the
        count stopped once it exceeded ``bound`` (tokens, the model's context window), and
        ``count`` is a lower bound above it (docs/decisions.md#d25). Default: the whole
        :meth:`count_input_tokens`; a provider whose count is long work overrides it.
        """
        counted = self.count_input_tokens(request)
        return None if counted is None else (counted, True)

    async def count_tokens(self, request: CountTokensRequest) -> CountTokensResponse:
        """Count a request's input tokens and say how (docs/decisions.md#d15). Default:
        UNIMPLEMENTED."""
        raise NotImplementedRPC("CountTokens")

    async def render(self, request: RenderRequest) -> RenderResponse:
        """Render a payload this plugin emitted. Default: UNIMPLEMENTED."""
        raise NotImplementedRPC("Render")

    @classmethod
    def from_cli(
        cls, *, base_url: str | None, discover: bool | None, env: Mapping[str, str]
    ) -> Provider:
        """Build the provider for ``protocol-py serve`` from its flags and the environment.

        Args:
            base_url: ``--base-url``, the upstream API root, or None for the vendor default.
            discover: ``--discover`` (True), ``--no-discover`` (False) or neither (None: the
                provider decides; an HTTP provider discovers when ``base_url`` is not the
                vendor's own).
            env: The process environment (API keys such as ``OPENAI_API_KEY``).

        Raises:
            ValueError: a flag this provider does not accept. The default accepts neither flag.
        """
        if base_url is not None or discover:
            raise ValueError(f"provider {cls.name!r} takes neither --base-url nor --discover")
        return cls()

    async def start(self) -> None:  # noqa: B027 - optional hook, intentionally empty
        """Prepare before serving (for example read the upstream model list). Default: nothing.

        Called once by the server before it validates :meth:`capabilities` and starts listening.

        Raises:
            ProviderStartError: the provider cannot be made ready; the server does not start.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional hook, intentionally empty
        """Release resources (HTTP clients) when the server shuts down. Default: nothing."""
