"""The context-window check of StreamCompletion (docs/decisions.md#d25).

Before the provider is called, the request's input is counted with the provider's own method
(:meth:`~protocol_py.provider.Provider.count_input_tokens`: the reference tokenizer counts
exactly, the vendor adapters use their documented estimate); a count above the model's
``context_window`` (ModelSpec, tokens) ends the stream with exactly one in-band
``ERROR_KIND_CONTEXT_OVERFLOW`` error naming the count and the window, and the provider never
sees the request. Counting stops once the count exceeds the window (the error then says "more
than <window> tokens"): a 60 MiB text is not counted to its end.

:func:`check_context_window` is synchronous and CPU-bound (counting walks every message), so
the server may run it off the event loop.
"""

from __future__ import annotations

from collections.abc import Callable

from protocol_py.bounded_text import quote_value
from protocol_py.errors import Violation, errors_only
from protocol_py.provider import Provider
from protocol_py_gen.model.v1 import (
    ErrorKind,
    ModelError,
    ModelSpec,
    StreamCompletionRequest,
    StreamEvent,
)


def check_context_window(
    provider: Provider, request: StreamCompletionRequest, spec: ModelSpec
) -> StreamEvent | None:
    """The CONTEXT_OVERFLOW error event when ``request``'s counted input exceeds
    ``spec.context_window``, else None.

    None also when the model declares no window (0) or the provider cannot count (its
    ``count_input_tokens`` answers None).

    Returns:
        ``StreamEvent(error=ModelError(kind=CONTEXT_OVERFLOW, retryable=False, message=
        "context window exceeded: the input is <n> tokens, over the <w>-token context window
        of model '<id>'"))`` or None; "more than <w> tokens" in place of "<n> tokens" when
        the count stopped early, once it exceeded the window
        (:meth:`~protocol_py.provider.Provider.count_input_tokens_bounded`).
    """
    window = spec.context_window
    if window <= 0:
        return None
    result = provider.count_input_tokens_bounded(request, window)
    if result is None:
        return None
    counted, whole = result
    if counted <= window:
        return None
    size = f"{counted} tokens" if whole else f"more than {window} tokens"
    return StreamEvent(
        error=ModelError(
            kind=ErrorKind.CONTEXT_OVERFLOW,
            message=(
                f"context window exceeded: the input is {size}, over the "
                f"{window}-token context window of model {quote_value(spec.id)}"
            ),
            retryable=False,
        )
    )


def checked_request(
    provider: Provider,
    request: StreamCompletionRequest,
    spec: ModelSpec,
    validate: Callable[[StreamCompletionRequest, ModelSpec], list[Violation]],
) -> tuple[list[Violation], StreamEvent | None]:
    """The request's errors (``validate``, warnings dropped) and, when there are none, its
    :func:`check_context_window` event: both steps in one call, so the server hands a large
    request to a worker thread once per turn instead of twice.

    Returns:
        ``(errors, overflow)``: ``overflow`` is None whenever ``errors`` is not empty.
    """
    violations = errors_only(validate(request, spec))
    if violations:
        return violations, None
    return violations, check_context_window(provider, request, spec)


__all__ = ["check_context_window", "checked_request"]
