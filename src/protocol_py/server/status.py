"""How failures become statuses: provider exceptions as ModelErrors, unary errors as gRPC
statuses, violations as the in-band INVALID_REQUEST event (docs/decisions.md#d10)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from typing import Final

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from protocol_py.bounded_text import bounded_message, listed, quote_value
from protocol_py.errors import Violation
from protocol_py.provider import NotImplementedRPC, ProviderError
from protocol_py.rules.request import violations_capped
from protocol_py_gen.model.v1 import (
    ErrorKind,
    ModelError,
    ModelSpec,
    StreamEvent,
)


def classify_exception(exc: BaseException) -> ModelError:
    """Turn a provider exception into the ModelError that ends its stream (docs/decisions.md#d10).

    :class:`ProviderError` keeps its own ModelError; ``httpx`` transport errors, ``OSError``
    and timeouts are TRANSIENT (retryable); an ``httpx.HTTPStatusError`` is classified by its
    status code; anything else is PERMANENT, naming only the exception type (the exception's
    text may hold secrets or request data and is logged, not sent).
    """
    if isinstance(exc, ProviderError):
        return exc.error
    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(exc, httpx.HTTPStatusError):
        status = int(exc.response.status_code)
        return _error_for_http_status(status)
    if (httpx is not None and isinstance(exc, httpx.TransportError)) or isinstance(
        exc, OSError | TimeoutError | asyncio.TimeoutError
    ):
        return ModelError(
            kind=ErrorKind.TRANSIENT,
            message=f"upstream connection failed ({type(exc).__name__})",
            retryable=True,
        )
    return ModelError(
        kind=ErrorKind.PERMANENT,
        message=f"internal provider error ({type(exc).__name__})",
        retryable=False,
    )


def _error_for_http_status(status: int) -> ModelError:
    kinds = {
        400: ErrorKind.INVALID_REQUEST,
        422: ErrorKind.INVALID_REQUEST,
        401: ErrorKind.AUTHENTICATION,
        403: ErrorKind.PERMISSION_DENIED,
        404: ErrorKind.NOT_FOUND,
        402: ErrorKind.QUOTA_EXHAUSTED,
        429: ErrorKind.RATE_LIMITED,
        529: ErrorKind.OVERLOADED,
    }
    kind = kinds.get(status, ErrorKind.TRANSIENT if status >= 500 else ErrorKind.PERMANENT)
    retryable = kind in (ErrorKind.RATE_LIMITED, ErrorKind.OVERLOADED, ErrorKind.TRANSIENT)
    return ModelError(
        kind=kind, message=f"upstream HTTP {status}", retryable=retryable, http_status=status
    )


_GRPC_STATUS_FOR_KIND: Final = {
    ErrorKind.INVALID_REQUEST: Status.INVALID_ARGUMENT,
    ErrorKind.AUTHENTICATION: Status.UNAUTHENTICATED,
    ErrorKind.PERMISSION_DENIED: Status.PERMISSION_DENIED,
    ErrorKind.NOT_FOUND: Status.NOT_FOUND,
    ErrorKind.RATE_LIMITED: Status.RESOURCE_EXHAUSTED,
    ErrorKind.QUOTA_EXHAUSTED: Status.RESOURCE_EXHAUSTED,
    ErrorKind.CONTEXT_OVERFLOW: Status.INVALID_ARGUMENT,
    ErrorKind.OVERLOADED: Status.UNAVAILABLE,
    ErrorKind.TRANSIENT: Status.UNAVAILABLE,
    ErrorKind.PERMANENT: Status.INTERNAL,
}


def bounded_status(exc: GRPCError) -> GRPCError:
    """``exc`` with its message capped by :func:`~protocol_py.bounded_text.bounded_message`
    (at most :data:`~protocol_py.bounded_text.MAX_ERROR_MESSAGE_BYTES` bytes once
    percent-encoded as ``grpc-message``); ``exc`` itself when it already fits."""
    if exc.message is None:
        return exc
    message = bounded_message(exc.message.encode("utf-8", "replace").decode("utf-8"))
    if message == exc.message:
        return exc
    return GRPCError(exc.status, message, exc.details)


def unary_error(exc: Exception) -> GRPCError:
    """Status for a unary RPC's exception (unary RPCs have no in-band error event); its
    message is capped (:func:`bounded_status`)."""
    if isinstance(exc, GRPCError):
        return bounded_status(exc)
    if isinstance(exc, NotImplementedRPC):
        error = GRPCError(Status.UNIMPLEMENTED, f"not implemented by this provider: {exc}")
    elif isinstance(exc, ValueError) and not isinstance(exc, ProviderError):
        error = GRPCError(Status.INVALID_ARGUMENT, str(exc))
    else:
        model_error = classify_exception(exc)
        status = _GRPC_STATUS_FOR_KIND.get(model_error.kind, Status.INTERNAL)
        error = GRPCError(status, f"{model_error.kind.name}: {model_error.message}")
    return bounded_status(error)


def internal_error(exc: BaseException) -> GRPCError:
    """INTERNAL naming only the exception type, for a failure of the server itself (its
    text may hold request data; the traceback is logged)."""
    return GRPCError(Status.INTERNAL, f"internal server error ({type(exc).__name__})")


def bounded_model_error(error: ModelError) -> ModelError:
    """``error`` with its message capped like a status message (:func:`bounded_message`)."""
    message = bounded_message(error.message)
    if message != error.message:
        error.message = message
    return error


def invalid_request_event(violations: list[Violation]) -> StreamEvent:
    """The in-band INVALID_REQUEST error listing ``violations`` (as many as fit in
    :data:`~protocol_py.bounded_text.MAX_ERROR_MESSAGE_BYTES`; the count says how many are
    listed of how many; ``"more than N"`` when validation stopped at
    :data:`~protocol_py.rules.request.MAX_VIOLATIONS`)."""
    more = violations_capped(violations)
    if more:
        violations = violations[:-1]
    return StreamEvent(
        error=ModelError(
            kind=ErrorKind.INVALID_REQUEST,
            message=listed("invalid request", "violation", [str(v) for v in violations], more=more),
            retryable=False,
        )
    )


# -- logging ---------------------------------------------------------------------------------


def unknown_model(model_id: str, models: Mapping[str, ModelSpec]) -> Violation:
    served = ", ".join(sorted(models)) or "none"
    return Violation(
        "model_id",
        "request.model_id.unknown",
        f"model {quote_value(model_id)} is not served by this provider (served: {served})",
    )
