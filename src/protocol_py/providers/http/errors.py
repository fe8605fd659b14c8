"""HTTP plumbing shared by the vendor adapters: errors, retry hints, rate limits, timeouts.

Implements docs/decisions.md#d10 (HTTP status and vendor error body to a :class:`ModelError` kind),
the retry-after rules of case C11, the rate-limit header mapping to ``RateLimitSnapshot`` (spec
"usage.rate_limits": only what the vendor sent) and the start-up / no-progress watchdog of case
C08.

Retry-after policy (C11), in this order:

1. ``retry-after-ms``: milliseconds (Azure, OpenAI), honoured when > 0.
2. ``retry-after`` as a number of seconds, honoured when > 0.
3. ``retry-after`` as an HTTP date (IMF-fixdate, RFC 7231): the time left until then; a date in
   the past gives no hint.
4. Anthropic only: when no retry-after was sent and a budget's ``anthropic-ratelimit-*-remaining``
   is 0, the time left until that budget's RFC 3339 ``-reset``.

Number grammar (both headers): ASCII digits with an optional fraction (``1*DIGIT ["." 1*DIGIT]``,
RFC 9110 delta-seconds plus the common non-standard fractional form), surrounding whitespace
allowed. Anything else (``nan``, ``inf``, ``1e999``, ``1e200``, ``-1``, ``+2``, ``1_0``, ``0x10``)
is not a hint; ``0`` is not a hint either. A hint (or a rate-limit reset duration) longer than
google.protobuf.Duration's range is clamped to :data:`MAX_DURATION_S` (315,576,000,000 s, about
10,000 years), so huge values never crash and always serialize.

A hint larger than :attr:`RetryPolicy.max_retry_after_s` (default 60 s) is not waited for: the
error is returned at once with the hint in ``ModelError.retry_after``. Without a hint the retry
waits an exponential backoff (0.5 s, 1 s, 2 s, ... capped at 8 s).

Secrets: every ModelError message built here passes through :func:`redact`, which removes the
configured API key (and any Authorization / x-api-key header value, scheme included) literally,
wherever the upstream echoed it, plus vendor-key-shaped substrings (``sk-...``, ``xai-...``,
``gsk_...``); :func:`redact_event` applies it to every vendor-supplied string of an event.

CONTEXT_OVERFLOW (docs/decisions.md#d10: only "when the vendor says the prompt did not fit"): the
vendor code ``context_length_exceeded``, or an error message about the prompt / context / input
tokens not fitting (``maximum context length``, ``context window``, ``prompt is too long``, ``input
is too long``, ``too many input tokens``, ``input tokens exceed ...``). Other "exceeds the maximum"
messages (tool count, ``max_tokens``, image size, stop sequences) and 413 ``request_too_large`` (a
byte limit, not a token limit) are INVALID_REQUEST.
"""

from __future__ import annotations

import base64
import email.utils
import math
import re
import socket
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from urllib.parse import quote, quote_plus

from protocol_py.bounded_text import MAX_LISTED_ITEM_CHARS, bounded_message, printable
from protocol_py.providers.http import vendor_json
from protocol_py_gen.model.v1 import (
    ErrorKind,
    ModelError,
    RateLimitKind,
    RateLimitSnapshot,
    StreamEvent,
)

__all__ = [
    "MAX_DURATION_S",
    "RetryPolicy",
    "anthropic_rate_limits",
    "anthropic_reset_hint",
    "classify_error_object",
    "duration_from_seconds",
    "encoded_forms",
    "error_from_http",
    "lower_headers",
    "openai_rate_limits",
    "parse_go_duration",
    "parse_retry_after",
    "parse_rfc3339",
    "redact",
    "redact_event",
    "redact_log_text",
    "remember_secrets",
    "transient_error",
    "transport_cause",
]

RETRYABLE_KINDS = frozenset({ErrorKind.RATE_LIMITED, ErrorKind.OVERLOADED, ErrorKind.TRANSIENT})
"""Error kinds for which the same request may succeed when retried."""

_QUOTA_CODES = frozenset(
    {"insufficient_quota", "billing_hard_limit_reached", "billing_error", "quota_exceeded"}
)
_OVERLOAD_CODES = frozenset(
    {"overloaded_error", "overloaded", "insufficient_system_resource", "server_overloaded"}
)
_VENDOR_CODE_KINDS: Mapping[str, ErrorKind] = {
    # specific vendor codes/types: they decide the kind before the HTTP status
    # (docs/decisions.md#d10)
    "invalid_api_key": ErrorKind.AUTHENTICATION,
    "incorrect_api_key": ErrorKind.AUTHENTICATION,
    "invalid_authentication": ErrorKind.AUTHENTICATION,
    "missing_api_key": ErrorKind.AUTHENTICATION,
    "authentication_error": ErrorKind.AUTHENTICATION,
    "unauthorized": ErrorKind.AUTHENTICATION,
    "permission_error": ErrorKind.PERMISSION_DENIED,
    "permission_denied": ErrorKind.PERMISSION_DENIED,
    "unsupported_country_region_territory": ErrorKind.PERMISSION_DENIED,
    "model_not_found": ErrorKind.NOT_FOUND,
    "deploymentnotfound": ErrorKind.NOT_FOUND,
    "not_found_error": ErrorKind.NOT_FOUND,
    "rate_limit_error": ErrorKind.RATE_LIMITED,
    "rate_limit_exceeded": ErrorKind.RATE_LIMITED,
    "request_too_large": ErrorKind.INVALID_REQUEST,
}
_VENDOR_TYPE_KINDS: Mapping[str, ErrorKind] = {
    # generic categories: used only when there is no HTTP status (an in-band error)
    "invalid_request_error": ErrorKind.INVALID_REQUEST,
    "api_error": ErrorKind.TRANSIENT,
    "server_error": ErrorKind.TRANSIENT,
    "timeout_error": ErrorKind.TRANSIENT,
}
_CONTEXT_OVERFLOW = re.compile(
    r"context[ _-]?(length|window)|maximum context|maximum (prompt|input) length|"
    r"\b(prompt|input|context|conversation|messages?) (is|are) too (long|large)|"
    r"too many (input |prompt )?tokens|"
    r"\b(prompt|input)( tokens?| length| size)? (exceeds?|exceeded|is longer than)|"
    r"exceeds? (the )?(model'?s? )?(context|maximum number of (input |prompt )?tokens)",
    re.IGNORECASE,
)
_SECRET = re.compile(r"(sk-|sk-ant-|xai-|gsk_)[A-Za-z0-9_\-*]{6,}")
_AUTH_SCHEME = re.compile(r"^(bearer|basic|token)\s+", re.IGNORECASE)
_SCHEMED_REDACTED = re.compile(r"\b(?:bearer|basic|token)\s+" + re.escape("<redacted>"), re.I)
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_DIGITS = re.compile(r"[0-9]+")
_INT64_MAX = 2**63 - 1

MAX_DURATION_S = 315_576_000_000
"""The largest google.protobuf.Duration, in seconds (10,000 years); longer values are clamped."""

REDACTED = "<redacted>"
"""What a removed secret is replaced with."""


def secret_values(api_key: str | None, headers: Mapping[str, str] | None = None) -> list[str]:
    """The literal strings :func:`redact` must remove: the key and credential header values.

    Args:
        api_key: The configured API key (None or empty: none).
        headers: Request headers; the values of ``authorization``, ``x-api-key``,
            ``api-key`` and ``proxy-authorization`` are added, with and without their
            ``Bearer``/``Basic``/``Token`` scheme.

    Returns:
        Non-empty strings, longest first (so a longer secret is replaced before its parts).
    """
    found: set[str] = set()
    if api_key and api_key.strip():
        found.update({api_key, api_key.strip()})
    for name, value in lower_headers(headers or {}).items():
        if name in ("authorization", "x-api-key", "api-key", "proxy-authorization") and value:
            found.add(value)
            bare = _AUTH_SCHEME.sub("", value).strip()
            if bare:
                found.add(bare)
    for value in [v for v in found if not any(c.isspace() for c in v)]:
        found.update(encoded_forms(value))
    return sorted(found, key=len, reverse=True)


MIN_ENCODED_SECRET_LENGTH: Final = 8
"""Secrets shorter than this (characters) get no encoded forms, and an encoded form shorter
than this is not kept: it would blank ordinary text."""

MAX_ENCODED_FORMS: Final = 9
"""How many encoded forms :func:`encoded_forms` returns for one secret at most."""


def encoded_forms(secret: str) -> list[str]:
    """The encodings of ``secret`` an upstream or a log might show, for literal redaction.

    Returned (at most :data:`MAX_ENCODED_FORMS`, none for a secret shorter than
    :data:`MIN_ENCODED_SECRET_LENGTH`): percent-encoded (RFC 3986, every reserved character
    encoded, and the form-encoding with ``+`` for space), lower-case hex of its UTF-8 bytes
    (:func:`redact` ignores letter case, so upper-case hex too), and standard and URL-safe
    base64 (RFC 4648) in each of the three alignments a 3-byte group can give it: the part of
    the base64 text that encodes only the secret's bytes, so ``base64("Bearer <key>")``,
    ``base64("<user>:<key>")`` or the key inside any longer base64 text all contain one of
    them (at most the 2 bytes at each end of the key, mixed with other bytes, stay visible).
    Forms equal to the secret itself are left out.
    """
    if len(secret) < MIN_ENCODED_SECRET_LENGTH:
        return []
    raw = secret.encode("utf-8")
    forms = [quote(secret, safe=""), quote_plus(secret, safe=""), raw.hex()]
    for offset in range(3):
        padded = bytes(offset) + raw
        whole = (offset + len(raw)) // 3 * 4  # base64 characters of complete 3-byte groups
        start = 4 if offset else 0  # the first group mixes the padding with the secret
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            forms.append(encode(padded)[start:whole].decode("ascii"))
    out: list[str] = []
    for form in forms:
        if len(form) >= MIN_ENCODED_SECRET_LENGTH and form != secret and form not in out:
            out.append(form)
    return out[:MAX_ENCODED_FORMS]


def redact(text: str, secrets: Sequence[str] = ()) -> str:
    """Remove secrets from a message meant for a client or a log line.

    Every occurrence (ASCII letter case ignored) of each string in ``secrets`` (the configured API
    key and credential header values, see :func:`secret_values`) is replaced with ``<redacted>``
    by plain substring search, never a regular expression built from them (the secrets are
    caller configuration): each secret costs one linear pass over ``text``, longest first, so a
    longer secret wins over its parts. Vendor-key-shaped substrings are replaced too
    are vendor-key-shaped substrings (``sk-...``, ``sk-ant-...``, ``xai-...``, ``gsk_...``),
    whatever the configured key. A ``Bearer`` / ``Basic`` / ``Token`` scheme in front of a
    removed value goes with it: the whole header value becomes ``<redacted>``. Keys of any
    length are replaced (a very short key therefore also replaces ordinary text; correctness of
    the secret rule wins over readability).

    Args:
        text: The message.
        secrets: Literal strings to remove, any order.
    """
    if secrets:
        text = _remove_secrets(text, sorted({s for s in secrets if s}, key=len, reverse=True))
    text = _SECRET.sub(REDACTED, text)
    # the whole header value goes, scheme included: never "Bearer <redacted>"
    return _SCHEMED_REDACTED.sub(REDACTED, text)


_ASCII_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
"""ASCII letters to lower case, nothing else: the folded text keeps every index of the text
(``str.lower`` may not: U+0130 becomes two characters)."""


def _remove_secrets(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every occurrence of each of ``secrets`` (longest first; ASCII case ignored)
    replaced by ``<redacted>``; ``str.find`` and ``str.replace`` only, linear in ``text`` per
    secret."""
    folded = text.translate(_ASCII_LOWER)
    spans: list[tuple[int, int]] = []
    for secret in secrets:
        needle = secret.translate(_ASCII_LOWER)
        at = folded.find(needle)
        if at < 0:
            continue
        while at >= 0:
            spans.append((at, at + len(needle)))
            at = folded.find(needle, at + len(needle))
        # mask what was found (same length, so indexes hold): a shorter secret that is part of
        # this one is not found again inside it
        folded = folded.replace(needle, "\x00" * len(needle))
    if not spans:
        return text
    spans.sort()
    out: list[str] = []
    pos = 0
    end = -1
    for start, stop in spans:
        if start < end:  # overlaps the previous span: widen it
            end = max(end, stop)
            continue
        if end >= 0:
            out.append(REDACTED)
            pos = end
        out.append(text[pos:start])
        end = stop
    out.append(REDACTED)
    out.append(text[end:])
    return "".join(out)


MAX_REMEMBERED_SECRETS: Final = 256
"""How many distinct secret strings (keys, credential header values, base-URL credentials)
:func:`remember_secrets` keeps for log redaction; the oldest are forgotten first."""

MIN_LOG_SECRET_LENGTH: Final = 8
"""Shorter secrets (characters) are not remembered for log redaction: a 1-character test key
would otherwise blank that letter in every log line of the process. Real vendor keys are 20+
characters; events and errors still redact keys of any length."""

_remembered: dict[str, None] = {}


def remember_secrets(values: Sequence[str]) -> None:
    """Register secrets that no log record may show (see :func:`redact_log_text`).

    The vendor providers call this with their :meth:`secrets` when created and configured, so a
    DEBUG record of httpcore (which logs response headers, where an upstream may echo the key)
    is redacted too. At most :data:`MAX_REMEMBERED_SECRETS` strings are kept, each at least
    :data:`MIN_LOG_SECRET_LENGTH` characters long.
    """
    for value in values:
        if len(value) >= MIN_LOG_SECRET_LENGTH:
            _remembered.pop(value, None)
            _remembered[value] = None
    while len(_remembered) > MAX_REMEMBERED_SECRETS:
        del _remembered[next(iter(_remembered))]


def redact_log_text(text: str) -> str:
    """``text`` with every remembered secret and vendor-key-shaped string removed."""
    return redact(text, list(_remembered))


def redact_error(error: ModelError, secrets: Sequence[str]) -> ModelError:
    """Redact ``message``, ``vendor_code`` and ``provider_request_id`` of ``error`` in place;
    the message is then cut to :data:`protocol_py.bounded_text.MAX_ERROR_MESSAGE_BYTES`
    (redacting first, so that a cut never leaves part of a secret).

    Returns:
        The same ModelError, for chaining.
    """
    error.message = bounded_message(redact(error.message, secrets))
    if error.vendor_code:
        error.vendor_code = redact(error.vendor_code, secrets)
    if error.provider_request_id:
        error.provider_request_id = redact(error.provider_request_id, secrets)
    return error


def redact_event(event: StreamEvent, secrets: Sequence[str]) -> StreamEvent:
    """Redact every vendor-supplied string of ``event`` that is not model output, in place.

    Covered: ``stream_start.provider_request_id`` (an upstream that echoes the Authorization
    header in ``x-request-id``), ``metadata`` (``actual_model``, ``system_fingerprint``,
    ``service_tier``, attribute names and values), ``error`` (:func:`redact_error`),
    ``safety_notice`` (message, attribute names and values), ``stop.vendor_reason`` and
    ``usage.vendor_cost`` (amount, unit).
    Content (text, thinking, tool calls) is the model's output and is left as it is.

    Returns:
        The same event, for chaining.
    """
    if event.error is not None:
        redact_error(event.error, secrets)
    elif event.stream_start is not None:
        start = event.stream_start
        start.provider_request_id = redact(start.provider_request_id, secrets)
    elif event.metadata is not None:
        meta = event.metadata
        for name in ("actual_model", "system_fingerprint", "service_tier"):
            value = getattr(meta, name)
            if value:
                setattr(meta, name, redact(value, secrets))
        if meta.attrs:
            meta.attrs = {redact(k, secrets): redact(v, secrets) for k, v in meta.attrs.items()}
    elif event.safety_notice is not None:
        notice = event.safety_notice
        if notice.message:
            notice.message = redact(notice.message, secrets)
        notice.attrs = {redact(k, secrets): redact(v, secrets) for k, v in notice.attrs.items()}
    elif event.stop is not None:
        if event.stop.vendor_reason:
            event.stop.vendor_reason = redact(event.stop.vendor_reason, secrets)
    elif event.usage is not None and event.usage.vendor_cost is not None:
        cost = event.usage.vendor_cost
        cost.amount = redact(cost.amount, secrets)
        cost.unit = redact(cost.unit, secrets)
    return event


def lower_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Return the headers with lower-cased names (HTTP field names are case-insensitive)."""
    return {str(k).lower(): str(v) for k, v in headers.items()}


def duration_from_seconds(seconds: float) -> timedelta:
    """A Duration value (betterproto2 maps google.protobuf.Duration to ``timedelta``).

    ``seconds`` is clamped to google.protobuf.Duration's range, +-:data:`MAX_DURATION_S`
    (infinities to the bound, NaN to 0), so the result always serializes and never raises.
    """
    if math.isnan(seconds):
        seconds = 0.0
    seconds = max(-MAX_DURATION_S, min(float(MAX_DURATION_S), seconds))
    return timedelta(seconds=seconds)


def _positive_number(text: str) -> float | None:
    """A ``1*DIGIT ["." 1*DIGIT]`` value > 0 (possibly inf), else None (module docstring)."""
    text = text.strip()
    if not _NUMBER.fullmatch(text):
        return None
    value = float(text)  # digits only: finite or inf, never raises
    return value if value > 0 else None


def parse_retry_after(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """The vendor's retry hint in seconds, or None when it sent no usable one (C11).

    Args:
        headers: Response headers, any case.
        now: The current time (UTC) for HTTP-date hints; defaults to the wall clock.

    Returns:
        Seconds to wait (> 0, at most :data:`MAX_DURATION_S`), or None. Never raises on
        malformed or huge values.
    """
    h = lower_headers(headers)
    ms = h.get("retry-after-ms")
    if ms is not None:
        value = _positive_number(ms)
        if value is not None:
            return min(value / 1000.0, float(MAX_DURATION_S))
    raw = h.get("retry-after")
    if raw is None:
        return None
    value = _positive_number(raw)
    if value is not None:
        return min(value, float(MAX_DURATION_S))
    if _DIGITS.search(raw) is None or not any(c.isalpha() for c in raw):
        return None  # not a number of the grammar and not a date either (e.g. "1_0", "-1")
    try:
        when = email.utils.parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    left = (when - (now or datetime.now(UTC))).total_seconds()
    return min(left, float(MAX_DURATION_S)) if left > 0 else None


def parse_rfc3339(text: str) -> datetime | None:
    """Parse an RFC 3339 date-time (``Z`` or an offset); None when malformed or offset-less."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def anthropic_reset_hint(
    headers: Mapping[str, str], *, now: datetime | None = None
) -> float | None:
    """Seconds until the earliest exhausted Anthropic budget resets, or None (C11 last rows)."""
    h = lower_headers(headers)
    best: float | None = None
    for family in _ANTHROPIC_FAMILIES:
        if h.get(f"anthropic-ratelimit-{family}-remaining", "").strip() != "0":
            continue
        reset = parse_rfc3339(h.get(f"anthropic-ratelimit-{family}-reset", ""))
        if reset is None:
            continue
        left = (reset - (now or datetime.now(UTC))).total_seconds()
        if left > 0 and (best is None or left < best):
            best = left
    return best


_GO_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_go_duration(text: str) -> float | None:
    """Parse OpenAI's reset durations (``12ms``, ``3.048s``, ``6m0s``, ``1h2m``) into seconds."""
    text = text.strip()
    if not text:
        return None
    pos = 0
    total = 0.0
    for match in _GO_DURATION.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    return total if pos == len(text) else None


def _int_header(h: Mapping[str, str], name: str) -> int | None:
    raw = h.get(name)
    if raw is None:
        return None
    text = raw.strip()
    if not _DIGITS.fullmatch(text):
        return None  # only ASCII digits: no sign, underscores or spaces inside
    value = int(text)
    return value if value <= _INT64_MAX else None


_OPENAI_FAMILIES = (("requests", RateLimitKind.REQUESTS), ("tokens", RateLimitKind.TOKENS))
_ANTHROPIC_FAMILIES = ("requests", "tokens", "input-tokens", "output-tokens")
_ANTHROPIC_KINDS = {
    "requests": RateLimitKind.REQUESTS,
    "tokens": RateLimitKind.TOKENS,
    "input-tokens": RateLimitKind.INPUT_TOKENS,
    "output-tokens": RateLimitKind.OUTPUT_TOKENS,
}


def openai_rate_limits(headers: Mapping[str, str]) -> list[RateLimitSnapshot]:
    """``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` to snapshots, requests first.

    The reset value is a duration (``12ms``) and becomes ``resets_after``. A family appears only
    when at least one of its headers was sent; unparsable values are left out.
    """
    h = lower_headers(headers)
    out: list[RateLimitSnapshot] = []
    for family, kind in _OPENAI_FAMILIES:
        limit = _int_header(h, f"x-ratelimit-limit-{family}")
        remaining = _int_header(h, f"x-ratelimit-remaining-{family}")
        reset_raw = h.get(f"x-ratelimit-reset-{family}")
        reset = parse_go_duration(reset_raw) if reset_raw is not None else None
        if limit is None and remaining is None and reset is None:
            continue
        out.append(
            RateLimitSnapshot(
                kind=kind,
                limit=limit,
                remaining=remaining,
                resets_after=duration_from_seconds(reset) if reset is not None else None,
            )
        )
    return out


def anthropic_rate_limits(headers: Mapping[str, str]) -> list[RateLimitSnapshot]:
    """``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-*`` to snapshots.

    The reset value is an RFC 3339 time and becomes ``resets_at``. Order: requests, tokens,
    input tokens, output tokens; a family appears only when the vendor sent it.
    """
    h = lower_headers(headers)
    out: list[RateLimitSnapshot] = []
    for family in _ANTHROPIC_FAMILIES:
        limit = _int_header(h, f"anthropic-ratelimit-{family}-limit")
        remaining = _int_header(h, f"anthropic-ratelimit-{family}-remaining")
        reset_raw = h.get(f"anthropic-ratelimit-{family}-reset")
        reset = parse_rfc3339(reset_raw) if reset_raw is not None else None
        if limit is None and remaining is None and reset is None:
            continue
        out.append(
            RateLimitSnapshot(
                kind=_ANTHROPIC_KINDS[family],
                limit=limit,
                remaining=remaining,
                resets_at=reset,
            )
        )
    return out


def _str_or_none(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def classify_error_object(
    obj: Any,
    *,
    status: int | None = None,
    retry_after_s: float | None = None,
    request_id: str | None = None,
) -> ModelError:
    """Classify a vendor error (HTTP error body or mid-stream error event) per
    docs/decisions.md#d10.

    The one classifier for both paths, so the same body gives the same kind over HTTP and
    in-band. Precedence: quota codes (or 402) -> QUOTA_EXHAUSTED; overload codes (or 529, 503
    "overloaded") -> OVERLOADED; context-size code or message -> CONTEXT_OVERFLOW; a specific
    vendor code or type (``invalid_api_key`` -> AUTHENTICATION, ``model_not_found`` ->
    NOT_FOUND, Anthropic's ``not_found_error`` ...; case-insensitive) -> its kind; the HTTP
    status when known; a generic vendor type (``invalid_request_error``, ``api_error`` ...);
    else TRANSIENT.

    Args:
        obj: The parsed JSON error body: ``{"error": {...}}`` (OpenAI-compatible, Groq),
            ``{"type": "error", "error": {...}}`` (Anthropic), or anything else.
        status: The HTTP status, or None for an in-stream error (then the body's own
            ``status_code``/``status`` field is used when present).
        retry_after_s: The retry hint in seconds, if any.
        request_id: The vendor request id, for ``provider_request_id``.

    Returns:
        A ModelError whose ``kind`` is never UNSPECIFIED. Never raises.
    """
    err: Any = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, str):
        err = {"message": err}  # some gateways send {"error": "text"}
    elif not isinstance(err, dict):
        err = obj if isinstance(obj, dict) else {}
    message = err.get("message")
    if not isinstance(message, str) or not message:
        message = f"vendor error (HTTP {status})" if status is not None else "vendor error"
    vtype = _str_or_none(err.get("type"))
    code = _str_or_none(err.get("code"))
    if status is None:  # an in-band error: its own HTTP-status-like field, when it has one
        for key in ("status_code", "status", "code"):
            value = err.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
                status = value
                break
    tags = {t.lower() for t in (vtype, code) if t}
    kind: ErrorKind
    if tags & _QUOTA_CODES or status == 402:
        kind = ErrorKind.QUOTA_EXHAUSTED
    elif (
        tags & _OVERLOAD_CODES or status == 529 or (status == 503 and "overload" in message.lower())
    ):
        kind = ErrorKind.OVERLOADED
    elif "context_length_exceeded" in tags or (
        status in (None, 400, 413, 422)
        and "request_too_large" not in tags
        and _CONTEXT_OVERFLOW.search(message)
    ):
        kind = ErrorKind.CONTEXT_OVERFLOW
    elif (specific := _first_kind(_VENDOR_CODE_KINDS, code, vtype)) is not None:
        kind = specific
    elif status is not None:
        kind = _status_kind(status)
    else:
        kind = _first_kind(_VENDOR_TYPE_KINDS, code, vtype) or ErrorKind.TRANSIENT
    vendor_code = code or vtype
    return ModelError(
        kind=kind,
        message=redact(printable(message)),
        retryable=kind in RETRYABLE_KINDS,
        retry_after=(
            duration_from_seconds(retry_after_s)
            if retry_after_s is not None and kind in RETRYABLE_KINDS
            else None
        ),
        http_status=status,
        vendor_code=printable(vendor_code, MAX_LISTED_ITEM_CHARS) if vendor_code else None,
        provider_request_id=printable(request_id, MAX_LISTED_ITEM_CHARS) if request_id else None,
    )


def _first_kind(table: Mapping[str, ErrorKind], *tags: str | None) -> ErrorKind | None:
    """The kind of the first tag (case-insensitive) found in ``table``, else None."""
    for tag in tags:
        if tag and (kind := table.get(tag.lower())) is not None:
            return kind
    return None


def _status_kind(status: int) -> ErrorKind:
    if status in (400, 413, 422):
        return ErrorKind.INVALID_REQUEST
    if status == 401:
        return ErrorKind.AUTHENTICATION
    if status == 403:
        return ErrorKind.PERMISSION_DENIED
    if status == 404:
        return ErrorKind.NOT_FOUND
    if status == 429:
        return ErrorKind.RATE_LIMITED
    if status == 408 or status >= 500:
        return ErrorKind.TRANSIENT
    return ErrorKind.PERMANENT


def error_from_http(
    status: int,
    body: bytes,
    headers: Mapping[str, str],
    *,
    request_id_header: str,
    anthropic: bool = False,
    now: datetime | None = None,
) -> ModelError:
    """Classify a non-2xx HTTP response (docs/decisions.md#d10) with its retry hint (C11).

    Args:
        status: The HTTP status code.
        body: The response body (JSON error object expected; anything else is tolerated).
        headers: The response headers.
        request_id_header: The header carrying the vendor request id (``x-request-id``,
            ``request-id``).
        anthropic: Also use the ``anthropic-ratelimit-*-reset`` fallback hint.
        now: The current time for date hints (tests).
    """
    h = lower_headers(headers)
    try:
        obj: Any = vendor_json.loads(body.decode("utf-8", errors="replace")) if body else {}
    except ValueError:
        text = body[:_MAX_TEXT_BODY_SHOWN].decode("utf-8", errors="replace").strip()
        obj = {"error": {"message": printable(text, _MAX_TEXT_BODY_SHOWN)}} if text else {}
    hint = parse_retry_after(h, now=now)
    if hint is None and anthropic:
        hint = anthropic_reset_hint(h, now=now)
    return classify_error_object(
        obj, status=status, retry_after_s=hint, request_id=h.get(request_id_header) or None
    )


_MAX_TEXT_BODY_SHOWN: Final = 500
"""The most characters of a non-JSON error body (an HTML page) used as the error message."""


def transport_cause(
    exc: BaseException, *, host: str | None = None, connect_timeout_s: float | None = None
) -> str:
    """The cause of an httpx transport failure in words, from the exception and its chain.

    Returns one of: ``DNS lookup failed for HOST``, ``connection refused``, ``TLS certificate
    not trusted (REASON)``, ``TLS handshake failed (REASON)``, ``timed out after N s while
    connecting`` (N is ``connect_timeout_s``), ``timed out reading the response``, ``connection
    closed by the upstream``, ``network unreachable``, else the exception type and its first
    line of text (bounded to :data:`protocol_py.bounded_text.MAX_LISTED_ITEM_CHARS`). Never
    raises; the text passes through :func:`redact`.
    """
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 8:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for item in chain:
        if isinstance(item, ssl.SSLCertVerificationError):
            reason = item.verify_message or item.reason or "verification failed"
            return redact(f"TLS certificate not trusted ({printable(str(reason), 120)})")
        if isinstance(item, socket.gaierror):
            return f"DNS lookup failed for {host or 'the upstream host'}"
        if isinstance(item, ConnectionRefusedError):
            return "connection refused"
    for item in chain:
        if isinstance(item, ssl.SSLError):
            reason = item.reason or str(item)
            return redact(f"TLS handshake failed ({printable(str(reason), 120)})")
    names = {type(item).__name__ for item in chain}
    text = " ".join(str(item) for item in chain).lower()
    if "ConnectTimeout" in names or "PoolTimeout" in names:
        after = f" after {connect_timeout_s:g} s" if connect_timeout_s is not None else ""
        return f"timed out{after} while connecting"
    if "ReadTimeout" in names or "WriteTimeout" in names:
        return "timed out reading the response"
    if "name or service not known" in text or "nodename nor servname" in text:
        return f"DNS lookup failed for {host or 'the upstream host'}"
    if "temporary failure in name resolution" in text:
        return f"DNS lookup failed for {host or 'the upstream host'}"
    if "connection refused" in text or "connect call failed" in text:
        return "connection refused"
    if "certificate verify failed" in text:
        return "TLS certificate not trusted"
    if "network is unreachable" in text:
        return "network unreachable"
    if "RemoteProtocolError" in names or "ReadError" in names:
        return "connection closed by the upstream"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    detail = f": {printable(first, MAX_LISTED_ITEM_CHARS)}" if first else ""
    return redact(f"{type(exc).__name__}{detail}")


def transient_error(message: str, *, request_id: str | None = None) -> ModelError:
    """A retryable TRANSIENT ModelError (network failure, timeout, stream cut short)."""
    return ModelError(
        kind=ErrorKind.TRANSIENT,
        message=message,
        retryable=True,
        provider_request_id=request_id or None,
    )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When and how long to wait before retrying a 429/529/503 answered before any event.

    Attributes:
        max_attempts: Total attempts including the first (>= 1).
        max_retry_after_s: The longest vendor hint that is waited for, in seconds; a longer
            hint ends the call with the error at once (C11: a 3600 s hint is not slept on).
        base_backoff_s: The first backoff step without a hint, in seconds; doubled each retry.
        max_backoff_s: The backoff cap, in seconds.
    """

    max_attempts: int = 3
    max_retry_after_s: float = 60.0
    base_backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def delay(self, attempt: int, error: ModelError) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``, or None to give up with ``error``.

        Args:
            attempt: How many attempts were made so far (1 after the first).
            error: The classified failure of the last attempt.
        """
        if attempt >= self.max_attempts or error.kind not in (
            ErrorKind.RATE_LIMITED,
            ErrorKind.OVERLOADED,
            ErrorKind.TRANSIENT,
        ):
            return None
        if error.http_status not in (429, 503, 529):
            return None
        if error.retry_after is not None:
            hint = error.retry_after.total_seconds()
            return hint if hint <= self.max_retry_after_s else None
        return float(min(self.max_backoff_s, self.base_backoff_s * (2 ** (attempt - 1))))


def seconds_until(when: datetime, now: datetime | None = None) -> float:
    """Seconds from ``now`` (default: wall clock, UTC) until ``when``."""
    return (when - (now or datetime.now(UTC))).total_seconds()
