"""Gemini and Vertex AI error objects -> ModelError (docs/decisions.md#d10; docs/adapters.md
"Gemini").

Google APIs answer ``{"error": {"code", "message", "status", "details": [...]}}`` (some paths
wrap it in an array, ``[{"error": ...}]``), for a non-2xx response and as a raw JSON object
after HTTP 200. ``details`` holds typed entries (``@type``
``type.googleapis.com/google.rpc.ErrorInfo`` with a ``reason``, ``QuotaFailure`` with
``violations[].quotaId``, ``RetryInfo`` with ``retryDelay``, a protobuf Duration string such as
``"34.4s"``). Classification, first match wins:

=====================================================  ======================================
error                                                  ModelError kind (retryable)
=====================================================  ======================================
ErrorInfo reason ``API_KEY_INVALID`` (HTTP 400)        AUTHENTICATION (no)
"input token count ... exceeds the maximum" (400)      CONTEXT_OVERFLOW (no)
400 ``FAILED_PRECONDITION`` (billing, free tier)       QUOTA_EXHAUSTED (no)
other 400                                              INVALID_REQUEST (no)
401 / ``UNAUTHENTICATED``                              AUTHENTICATION (no)
403 / ``PERMISSION_DENIED``                            PERMISSION_DENIED (no)
404 / ``NOT_FOUND``                                    NOT_FOUND (no)
429 with ErrorInfo ``MODEL_CAPACITY_EXHAUSTED``        OVERLOADED (yes)
429 with a ``quotaId`` containing ``PerDay``, or a     QUOTA_EXHAUSTED (no)
message containing ``limit: 0``
other 429 / ``RESOURCE_EXHAUSTED``                     RATE_LIMITED (yes)
503 / ``UNAVAILABLE`` saying overloaded or high        OVERLOADED (yes)
demand; 529
other 5xx, ``INTERNAL``, ``DEADLINE_EXCEEDED``,        TRANSIENT (yes)
``UNAVAILABLE``
anything else                                          the shared classifier
                                                       (:func:`~protocol_py.providers.http.
                                                       errors.classify_error_object`)
=====================================================  ======================================

``retry_after`` is ``RetryInfo.retryDelay``, else "Please retry in 31.9s" in the message, else
the ``retry-after`` header (Google sends none today); ``http_status`` is the response's status
(an error object inside a 200 body has none: its ``error.code`` only decides the kind);
``vendor_code`` is ``error.status`` (``RESOURCE_EXHAUSTED``), or the
ErrorInfo reason when the object has no status.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from protocol_py.bounded_text import MAX_LISTED_ITEM_CHARS, printable
from protocol_py.providers.http import vendor_json
from protocol_py.providers.http.errors import (
    RETRYABLE_KINDS,
    classify_error_object,
    duration_from_seconds,
    error_from_http,
    lower_headers,
    parse_retry_after,
    redact,
)
from protocol_py_gen.model.v1 import ErrorKind, ModelError

__all__ = ["classify_gemini_error", "gemini_error_from_http", "parse_duration_string"]

_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)s\s*")
_RETRY_IN = re.compile(r"retry in ([0-9]+(?:\.[0-9]+)?)\s*s", re.IGNORECASE)
_OVERFLOW = re.compile(
    r"input token count.*exceeds|exceeds the maximum number of tokens|"
    r"token count .*exceeds .*limit",
    re.IGNORECASE,
)
_STATUS_KINDS: Final[Mapping[str, ErrorKind]] = {
    "UNAUTHENTICATED": ErrorKind.AUTHENTICATION,
    "PERMISSION_DENIED": ErrorKind.PERMISSION_DENIED,
    "NOT_FOUND": ErrorKind.NOT_FOUND,
    "RESOURCE_EXHAUSTED": ErrorKind.RATE_LIMITED,
    "INTERNAL": ErrorKind.TRANSIENT,
    "UNAVAILABLE": ErrorKind.TRANSIENT,
    "DEADLINE_EXCEEDED": ErrorKind.TRANSIENT,
    "ABORTED": ErrorKind.TRANSIENT,
    "INVALID_ARGUMENT": ErrorKind.INVALID_REQUEST,
    "FAILED_PRECONDITION": ErrorKind.INVALID_REQUEST,
    "OUT_OF_RANGE": ErrorKind.INVALID_REQUEST,
}


def parse_duration_string(value: object) -> float | None:
    """A protobuf Duration in JSON form (``"34.4s"``) as seconds > 0, else None."""
    if not isinstance(value, str):
        return None
    match = _DURATION.fullmatch(value)
    if match is None:
        return None
    seconds = float(match.group(1))
    return seconds if seconds > 0 else None


def _details(err: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    details = err.get("details")
    if not isinstance(details, list):
        return []
    return [d for d in details if isinstance(d, dict)]


def _detail_type(detail: Mapping[str, Any]) -> str:
    kind = detail.get("@type")
    return kind.rsplit(".", 1)[-1] if isinstance(kind, str) else ""


def _error_object(obj: Any) -> Mapping[str, Any] | None:
    """The ``error`` member of ``{"error": {...}}`` or of ``[{"error": {...}}, ...]``."""
    if isinstance(obj, list) and obj:
        obj = obj[0]
    if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
        error: Mapping[str, Any] = obj["error"]
        return error
    return None


def _status_number(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    return None


def classify_gemini_error(
    obj: Any,
    *,
    status: int | None = None,
    retry_after_s: float | None = None,
    request_id: str | None = None,
) -> ModelError:
    """Classify a Google API error object (module docstring), non-2xx body or in-band.

    Args:
        obj: The parsed JSON: ``{"error": {...}}``, ``[{"error": {...}}]`` or anything else
            (then the shared classifier decides from ``status``).
        status: The HTTP status; None for an error inside a 200 body (``error.code`` is used).
        retry_after_s: A ``retry-after`` header hint, used only when the body has none.
        request_id: The vendor's response id, for ``provider_request_id``.

    Returns:
        A ModelError whose kind is never UNSPECIFIED. Never raises.
    """
    err = _error_object(obj)
    if err is None:
        return classify_error_object(
            obj if isinstance(obj, dict) else {},
            status=status,
            retry_after_s=retry_after_s,
            request_id=request_id,
        )
    code = _status_number(err.get("code"))
    http_status = status if status is not None else code  # decides the kind
    raw_status = err.get("status")
    google_status = raw_status if isinstance(raw_status, str) and raw_status else None
    message = err.get("message")
    if not isinstance(message, str) or not message:
        message = f"vendor error (HTTP {http_status})" if http_status else "vendor error"
    reasons = [
        d["reason"]
        for d in _details(err)
        if _detail_type(d) == "ErrorInfo" and isinstance(d.get("reason"), str)
    ]
    quota_ids = [
        str(v.get("quotaId", ""))
        for d in _details(err)
        if _detail_type(d) == "QuotaFailure" and isinstance(d.get("violations"), list)
        for v in d["violations"]
        if isinstance(v, dict)
    ]
    hint = next(
        (
            s
            for d in _details(err)
            if _detail_type(d) == "RetryInfo"
            and (s := parse_duration_string(d.get("retryDelay"))) is not None
        ),
        None,
    )
    if hint is None:
        found = _RETRY_IN.search(message)
        hint = float(found.group(1)) if found and float(found.group(1)) > 0 else retry_after_s
    lowered = message.lower()
    kind: ErrorKind
    if "API_KEY_INVALID" in reasons or "API key not valid" in message:
        kind = ErrorKind.AUTHENTICATION
    elif http_status in (None, 400) and _OVERFLOW.search(message):
        kind = ErrorKind.CONTEXT_OVERFLOW
    elif http_status == 400 and google_status == "FAILED_PRECONDITION":
        kind = ErrorKind.QUOTA_EXHAUSTED
    elif http_status == 429 or google_status == "RESOURCE_EXHAUSTED":
        if "MODEL_CAPACITY_EXHAUSTED" in reasons:
            kind = ErrorKind.OVERLOADED
        elif any("PerDay" in q for q in quota_ids) or "limit: 0" in message:
            kind = ErrorKind.QUOTA_EXHAUSTED
        else:
            kind = ErrorKind.RATE_LIMITED
    elif http_status == 529 or (
        (http_status == 503 or google_status == "UNAVAILABLE")
        and ("overload" in lowered or "high demand" in lowered)
    ):
        kind = ErrorKind.OVERLOADED
    elif http_status is not None and http_status >= 500:
        kind = ErrorKind.TRANSIENT
    elif http_status == 400:
        kind = ErrorKind.INVALID_REQUEST
    elif http_status == 401:
        kind = ErrorKind.AUTHENTICATION
    elif http_status == 403:
        kind = ErrorKind.PERMISSION_DENIED
    elif http_status == 404:
        kind = ErrorKind.NOT_FOUND
    elif google_status is not None and google_status in _STATUS_KINDS:
        kind = _STATUS_KINDS[google_status]
    else:
        return classify_error_object(
            {"error": dict(err)},
            status=http_status,
            retry_after_s=hint,
            request_id=request_id,
        )
    vendor_code = google_status or (reasons[0] if reasons else None)
    retryable = kind in RETRYABLE_KINDS
    return ModelError(
        kind=kind,
        message=redact(printable(message)),
        retryable=retryable,
        retry_after=duration_from_seconds(hint) if hint is not None and retryable else None,
        http_status=status,  # only an HTTP response's own status (None in-band)
        vendor_code=printable(vendor_code, MAX_LISTED_ITEM_CHARS) if vendor_code else None,
        provider_request_id=printable(request_id, MAX_LISTED_ITEM_CHARS) if request_id else None,
    )


def gemini_error_from_http(status: int, body: bytes, headers: Mapping[str, str]) -> ModelError:
    """Classify a non-2xx Gemini / Vertex response (:func:`classify_gemini_error`).

    A body that is not JSON (an HTML page from a proxy) becomes the message (printable, at
    most 500 characters) and the HTTP status decides the kind.
    """
    try:
        obj: Any = vendor_json.loads(body.decode("utf-8", errors="replace")) if body else {}
    except ValueError:  # the shared reading of a non-JSON body
        return error_from_http(status, body, headers, request_id_header="x-goog-request-id")
    return classify_gemini_error(
        obj, status=status, retry_after_s=parse_retry_after(lower_headers(headers))
    )
