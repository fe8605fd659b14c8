"""Upstream base URLs: parsing, joining and redaction (docs/adapters.md "Base URL").

* :func:`parse_base_url` checks a ``--base-url`` / Configure ``base_url`` once: an absolute
  ``http``/``https`` URL with a host and a valid port, without ``user:password@`` userinfo.
  Anything else is a ValueError (the CLI exits 2; Configure answers INVALID_ARGUMENT) whose
  text never shows the URL's credentials.
* :func:`join_url` appends an endpoint path to the base URL's path and keeps its query string
  (``http://h/v1?api-version=X`` + ``/chat/completions`` ->
  ``http://h/v1/chat/completions?api-version=X``).
* :func:`redact_url` and :class:`RedactURLFilter` keep the URL's userinfo, query values and
  secret-looking path segments out of messages and log records (httpx logs every request URL
  at INFO); :func:`safe_location` shows no userinfo or query, and no such segment either.
  A path segment is secret-looking when it, or its percent-decoded form,
  :func:`~protocol_py.server.config_schema.looks_secret` (``/v1/keys/sk-.../`` ->
  ``/v1/keys/***/``; docs/security.md).
* :func:`url_secrets` lists the credential strings a base URL carries, for
  :func:`protocol_py.providers.http.errors.redact`.
"""

from __future__ import annotations

import functools
import logging
import re
from urllib.parse import unquote

import httpx

from protocol_py.providers.http.errors import redact_log_text
from protocol_py.server.config_schema import looks_secret

URL_CACHE_SIZE = 64
"""Most distinct URLs :func:`join_url` and :func:`parsed_url` keep (a provider has a few)."""

__all__ = [
    "RedactURLFilter",
    "install_log_redaction",
    "join_url",
    "parse_base_url",
    "redact_path",
    "redact_text",
    "redact_url",
    "url_secrets",
]

_SCHEMES = ("http", "https")
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s@\"'<>]*@")
_QUERY_VALUE = re.compile(r"(?P<key>[?&;][^=&;#\s\"'<>]*=)[^&;#\s\"'<>]+")
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")


def _secret_segment(segment: str) -> bool:
    return bool(segment) and (looks_secret(segment) or looks_secret(unquote(segment)))


def redact_path(path: str) -> str:
    """``path`` (a URL path, ``/``-separated) with each secret-looking segment replaced by
    ``***`` (module docstring); the other segments and the slashes are kept."""
    if not path.strip("/"):
        return path
    parts = path.split("/")
    if not any(_secret_segment(p) for p in parts):
        return path
    return "/".join("***" if _secret_segment(p) else p for p in parts)


def _redact_url_path(url: str) -> str:
    """The path of ``url`` (``scheme://authority/path?query``) through :func:`redact_path`."""
    authority = url.find("//") + 2
    start = len(url)
    for mark in "/?#":
        at = url.find(mark, authority)
        if 0 <= at < start:
            start = at
    if start == len(url) or url[start] != "/":
        return url
    end = len(url)
    for mark in "?#":
        at = url.find(mark, start)
        if 0 <= at < end:
            end = at
    return url[:start] + redact_path(url[start:end]) + url[end:]


def redact_text(text: str) -> str:
    """``text`` with every URL's userinfo replaced by ``***@``, every query value by ``***`` and
    every secret-looking path segment by ``***``.

    Only substrings that look like absolute URLs (``scheme://...``) are touched.
    """

    def one(match: re.Match[str]) -> str:
        url = _USERINFO.sub(r"\g<scheme>***@", match.group(0))
        return _QUERY_VALUE.sub(r"\g<key>***", _redact_url_path(url))

    return _URL.sub(one, text)


def redact_url(url: str | httpx.URL) -> str:
    """``url`` as text with its userinfo and query values replaced by ``***`` (safe to log)."""
    return redact_text(str(url))


def safe_location(url: str | httpx.URL) -> str:
    """``url`` as ``scheme://host:port/path``: no userinfo, no query, no fragment, secret-looking
    path segments as ``***`` (safe to show a client or log; the port is the explicit one or the
    scheme's default)."""
    try:
        parsed = httpx.URL(str(url))
    except httpx.InvalidURL:
        return "<unusable URL>"
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    port = parsed.port or {"http": 80, "https": 443}.get(parsed.scheme)
    netloc = f"{host}:{port}" if port else host
    return f"{parsed.scheme}://{netloc}{redact_path(parsed.path)}"


def parse_base_url(value: str, *, what: str = "base_url") -> str:
    """Check an upstream base URL and return it normalised (trailing ``/`` of the path removed).

    Args:
        value: The URL text (``--base-url`` or Configure ``base_url``).
        what: The option or field name used in the error message.

    Returns:
        The URL text with any trailing slash removed from its path; the query is kept.

    Raises:
        ValueError: the value is not a string, contains whitespace, is not an absolute
            ``http``/``https`` URL, has no host, has a port outside 1..65535 or a fragment. The
            message shows the URL redacted. Also when the URL holds userinfo
            (``user:password@``): credentials belong in the API key; that
            message names only ``what`` and the rule, never the URL.
    """
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected a URL string, got {type(value).__name__}")
    shown = redact_url(value)
    if any(ch.isspace() or ord(ch) < 0x20 for ch in value):
        raise ValueError(f"{what} {shown!r} contains whitespace or a control character")
    try:
        url = httpx.URL(value)
        port = url.port
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise ValueError(f"{what} {shown!r} is not a valid URL ({type(exc).__name__})") from None
    if url.scheme not in _SCHEMES:
        got = f"scheme {url.scheme!r}" if url.scheme else "no scheme"
        raise ValueError(f"{what} {shown!r} must be an absolute http(s) URL (got {got})")
    if not url.host:
        raise ValueError(f"{what} {shown!r} has no host")
    if url.userinfo:
        # httpx would send them as "Authorization: Basic ..." instead of the API key, and an
        # upstream echoing that header would show them; neither the URL nor its parts is echoed
        raise ValueError(
            f"{what}: credentials in the URL (user:password@host) are not allowed; give the "
            "API key as Configure api_key or the provider's API key variable"
        )
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"{what} {shown!r} has port {port} outside 1..65535")
    if url.fragment:
        raise ValueError(f"{what} {shown!r} must not have a #fragment")
    return str(url.copy_with(path=url.path.rstrip("/")))


@functools.lru_cache(maxsize=URL_CACHE_SIZE)
def join_url(base: str, path: str) -> str:
    """``base`` with ``path`` (starting with ``/``) appended to its path, query kept.

    ``base`` is a URL accepted by :func:`parse_base_url`. The last :data:`URL_CACHE_SIZE`
    results are kept (a provider joins the same two strings on every call).
    """
    url = httpx.URL(base)
    return str(url.copy_with(path=url.path.rstrip("/") + path))


_CREDENTIAL_KEY = re.compile(
    r"key|token|secret|passw|pwd|auth|sig|credential|session|code", re.IGNORECASE
)
_MIN_OPAQUE = 16
"""A query value under any other name is a secret only from this length on (short values such
as ``api-version=2024-10-21`` would otherwise blank ordinary text in error messages)."""


@functools.lru_cache(maxsize=URL_CACHE_SIZE)
def parsed_url(url: str) -> httpx.URL:
    """``httpx.URL(url)``, the last :data:`URL_CACHE_SIZE` kept (an ``httpx.URL`` is
    immutable): the URL a provider POSTs to every call is parsed once.

    Raises:
        httpx.InvalidURL: as ``httpx.URL``.
    """
    return httpx.URL(url)


def url_secrets(base: str | None) -> list[str]:
    """The credential strings in a base URL, for literal redaction from errors and logs.

    Returned, raw and percent-decoded: the whole userinfo and its password; the user name when
    it is at least 8 characters; each query value whose name looks like a credential (``key``,
    ``token``, ``secret``, ``sig``, ``auth``, ...) and any other query value of at least 16
    characters; each secret-looking path segment (module docstring). Empty strings are left
    out; longest first. Never raises.
    """
    if not base:
        return []
    try:
        url = httpx.URL(base)
    except (httpx.InvalidURL, ValueError, TypeError):
        return []
    found: set[str] = set()
    userinfo = url.userinfo.decode("ascii", errors="replace")
    if userinfo:
        found.update({userinfo, unquote(userinfo)})
        user, _, password = userinfo.partition(":")
        found.update({password, unquote(password)})
        if len(unquote(user)) >= 8:
            found.update({user, unquote(user)})
    for segment in url.raw_path.decode("ascii", errors="replace").split("?")[0].split("/"):
        if _secret_segment(segment):
            found.update({segment, unquote(segment)})
    query = url.query.decode("ascii", errors="replace")
    for raw in re.split(r"[&;]", query):
        name, eq, value = raw.partition("=")
        if not eq or not value:
            continue
        if _CREDENTIAL_KEY.search(unquote(name)) or len(unquote(value)) >= _MIN_OPAQUE:
            found.update({value, unquote(value.replace("+", " "))})
    return sorted((s for s in found if s), key=len, reverse=True)


class RedactURLFilter(logging.Filter):
    """A logging filter that rewrites a record's message with :func:`redact_text` applied, and
    with every secret a vendor provider registered removed
    (:func:`protocol_py.providers.http.errors.redact_log_text`: the API key, credential header
    values, scheme included, and vendor-key-shaped strings), at every level: httpcore's DEBUG
    records show response headers, where an upstream may echo the key.

    The record's ``msg`` becomes the formatted, redacted text and ``args`` is cleared, so every
    handler sees only the redacted line. A record whose message cannot be formatted is kept
    unchanged (logging reports the formatting error as usual).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact the record in place; always keep it."""
        try:
            message = record.getMessage()
        except Exception:  # logging's own error handling reports it later
            return True
        redacted = redact_log_text(redact_text(message))
        if redacted != message:
            record.msg = redacted
            record.args = None
        return True


_FILTER = RedactURLFilter()
_HTTPCORE_LOGGERS = (
    "httpcore.connection",
    "httpcore.connection_pool",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
)
"""httpcore's module loggers; they are created lazily, so they are named here."""


def install_log_redaction() -> None:
    """Attach :class:`RedactURLFilter` to the ``httpx`` and every ``httpcore`` logger.

    Logger filters do not apply to records propagated from child loggers, so each
    ``httpcore.*`` module logger (named, since httpcore creates them lazily) and any other
    existing ``httpx.*`` / ``httpcore.*`` logger gets the filter too. Idempotent.
    """
    names = {"httpx", "httpcore", "protocol_py.providers", *_HTTPCORE_LOGGERS}
    names.update(
        name for name in logging.root.manager.loggerDict if name.startswith(("httpx.", "httpcore."))
    )
    for name in sorted(names):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
