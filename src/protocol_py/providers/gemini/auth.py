"""Vertex AI credentials through the ``google-auth`` library (docs/adapters.md "Gemini").

Where the credentials come from, first match wins:

1. Configure ``credentials``: a service-account key or an authorized-user object (the JSON of
   a key file, or of ``gcloud auth application-default login``);
2. Configure ``credentials_file``, else the ``GOOGLE_APPLICATION_CREDENTIALS`` file;
3. Application Default Credentials (``google.auth.default``: the gcloud file, the metadata
   server of Compute Engine, Cloud Run, GKE).

The OAuth scope is ``https://www.googleapis.com/auth/cloud-platform``. ``token_uri`` (Configure
``token_uri`` or ``VERTEX_TOKEN_URI``) replaces the token endpoint of a service-account or
authorized-user credential, so tests (and private deployments) run against a local endpoint.
google-auth is synchronous: a token is fetched in a worker thread, over httpx, at most once at
a time, when the current one is missing or about to expire (google-auth's own margin).

Failures are AUTHENTICATION errors, never sent upstream:

- no credentials anywhere (google-auth's ``DefaultCredentialsError``): :data:`NO_CREDENTIALS`,
  naming ``GOOGLE_APPLICATION_CREDENTIALS``, ``gcloud auth application-default login`` and the
  Configure keys, and where the project and location come from;
- a refused refresh (the token endpoint's ``invalid_grant``, a transport failure): the
  exception type and google-auth's one-line reason, at most :data:`MAX_REASON_CHARS`
  characters, with every secret of the credentials (private key, refresh token, client
  secret) removed should the endpoint have echoed one.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from typing import Any, Final

import httpx

from protocol_py.provider import ProviderError
from protocol_py_gen.model.v1 import ErrorKind, ModelError

__all__ = [
    "MAX_REASON_CHARS",
    "NO_CREDENTIALS",
    "SCOPE",
    "TOKEN_TIMEOUT_S",
    "VertexCredentials",
    "adc_file_present",
    "load_google_auth",
]

SCOPE: Final = "https://www.googleapis.com/auth/cloud-platform"
"""The OAuth scope Vertex AI calls need."""

TOKEN_TIMEOUT_S: Final = 30.0
"""Longest wait for the token endpoint, seconds."""

MAX_REASON_CHARS: Final = 200
"""Most characters of google-auth's reason quoted in an AUTHENTICATION error."""

NO_CREDENTIALS: Final = (
    "vertex: no credentials found: set GOOGLE_APPLICATION_CREDENTIALS to a service-account or "
    "authorized-user key file, run gcloud auth application-default login, or Configure "
    "credentials or credentials_file (the project comes from Configure project or "
    "GOOGLE_CLOUD_PROJECT, the location from Configure location or GOOGLE_CLOUD_LOCATION, "
    "default global)"
)
"""The AUTHENTICATION message when no credentials can be found anywhere."""

_SECRET_KEYS: Final = ("private_key", "refresh_token", "client_secret", "private_key_id")


def adc_file_present(env: Mapping[str, str] | None = None) -> bool:
    """Whether an Application Default Credentials file can be found without any request:
    ``GOOGLE_APPLICATION_CREDENTIALS``, or gcloud's ``application_default_credentials.json``
    (under ``CLOUDSDK_CONFIG``, else ``~/.config/gcloud``, or ``%APPDATA%/gcloud`` on
    Windows). The metadata server of Google Cloud hosts is not probed (that is a request)."""
    env = env if env is not None else os.environ
    if env.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return True
    config = env.get("CLOUDSDK_CONFIG")
    if not config:
        if os.name == "nt":
            config = os.path.join(env.get("APPDATA", ""), "gcloud")
        else:
            config = os.path.join(os.path.expanduser("~"), ".config", "gcloud")
    return os.path.isfile(os.path.join(config, "application_default_credentials.json"))


def load_google_auth() -> Any:
    """Import ``google.auth`` (the ``vertex`` extra), or raise a PERMANENT ProviderError."""
    try:
        import google.auth  # noqa: PLC0415
        import google.auth.transport  # noqa: PLC0415
    except ImportError:
        raise ProviderError(
            ModelError(
                kind=ErrorKind.PERMANENT,
                message="the vertex provider needs google-auth: pip install 'protocol-py[vertex]'",
                retryable=False,
            )
        ) from None
    return google.auth


def _auth_error(message: str) -> ProviderError:
    return ProviderError(
        ModelError(kind=ErrorKind.AUTHENTICATION, message=message[:500], retryable=False)
    )


class _Response:
    """google.auth.transport.Response over an httpx response."""

    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self.headers = dict(response.headers)
        self.data = response.content


class _HttpxRequest:
    """google.auth.transport.Request over a synchronous httpx client (no ``requests``)."""

    def __init__(self, client: httpx.Client) -> None:
        self._client = client

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        **_: Any,
    ) -> _Response:
        from google.auth import exceptions  # noqa: PLC0415

        try:
            response = self._client.request(
                method,
                url,
                content=body,
                headers=dict(headers or {}),
                timeout=timeout or TOKEN_TIMEOUT_S,
            )
        except httpx.HTTPError as exc:
            raise exceptions.TransportError(  # type: ignore[no-untyped-call]
                f"token request failed ({type(exc).__name__})"
            ) from None
        return _Response(response)


class VertexCredentials:
    """OAuth access tokens for Vertex AI (module docstring).

    Args:
        info: A credentials object (Configure ``credentials``).
        file: A credentials file path (Configure ``credentials_file`` or
            ``GOOGLE_APPLICATION_CREDENTIALS``).
        token_uri: A replacement token endpoint.
        transport: An httpx transport for the token requests (tests).
    """

    def __init__(
        self,
        *,
        info: Mapping[str, Any] | None = None,
        file: str | None = None,
        token_uri: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._info = dict(info) if info is not None else None
        self._file = file
        self._token_uri = token_uri
        self._transport = transport
        self._credentials: Any = None
        self._project: str | None = None
        self._lock = asyncio.Lock()
        self.token: str | None = None
        """The current access token (None before the first refresh)."""

    @property
    def configured(self) -> bool:
        """Whether credentials were given (an object or a file), not left to ADC."""
        return self._info is not None or bool(self._file)

    @property
    def project(self) -> str | None:
        """The project id the credentials name (a service-account key's ``project_id``)."""
        if self._project is None and self._info is not None:
            value = self._info.get("project_id")
            self._project = value if isinstance(value, str) and value else None
        return self._project

    def describe(self) -> str:
        """A stable, secret-free identity of these credentials (for cache scoping)."""
        if self._info is not None:
            who = self._info.get("client_email") or self._info.get("client_id") or ""
            return f"info:{who}"
        return f"file:{self._file}" if self._file else "adc"

    async def refresh(self) -> str:
        """A valid access token, fetched when the current one is missing or expiring.

        Raises:
            ProviderError: AUTHENTICATION when no credentials can be loaded or the token
                endpoint refuses them; PERMANENT when google-auth is not installed.
        """
        load_google_auth()
        async with self._lock:
            credentials = self._credentials
            if credentials is not None and credentials.valid and self.token:
                return self.token
            self.token = await asyncio.to_thread(self._refresh_sync)
            return self.token

    def _load(self) -> Any:
        import google.auth  # noqa: PLC0415
        from google.oauth2 import credentials as user  # noqa: PLC0415
        from google.oauth2 import service_account  # noqa: PLC0415

        info = self._info
        if info is None and self._file:
            try:
                with open(self._file, encoding="utf-8") as fh:
                    info = json.load(fh)
            except (OSError, ValueError) as exc:
                raise _auth_error(
                    f"vertex: cannot read the credentials file ({type(exc).__name__})"
                ) from None
            if not isinstance(info, dict):
                raise _auth_error("vertex: the credentials file does not hold a JSON object")
            self._info = info
        if info is None:
            found, project = google.auth.default(scopes=[SCOPE])
            self._project = self._project or project
            return self._with_token_uri(found)
        kind = info.get("type")
        if kind == "service_account":
            found = service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
                info, scopes=[SCOPE]
            )
        elif kind == "authorized_user":
            found = user.Credentials.from_authorized_user_info(  # type: ignore[no-untyped-call]
                info, scopes=[SCOPE]
            )
        else:
            found, project = google.auth.load_credentials_from_dict(  # type: ignore[no-untyped-call]
                info, scopes=[SCOPE]
            )
            self._project = self._project or project
        return self._with_token_uri(found)

    def _with_token_uri(self, found: Any) -> Any:
        """``found`` with the replacement token endpoint, when one is set and the kind of
        credentials has a token endpoint (service account, authorized user)."""
        if self._token_uri and hasattr(found, "with_token_uri"):
            return found.with_token_uri(self._token_uri)
        return found

    def _reason(self, exc: BaseException) -> str:
        """google-auth's reason for ``exc``: its message (not the token endpoint's whole
        answer, which google-auth keeps as a second argument), first line, bounded, with the
        credentials' secrets removed."""
        first = exc.args[0] if exc.args else ""
        text = first if isinstance(first, str) else type(exc).__name__
        lines = text.splitlines()
        reason = lines[0] if lines else ""
        known = self._info or {}
        for key in _SECRET_KEYS:
            for secret in (known.get(key), getattr(self._credentials, key, None)):
                if isinstance(secret, str) and len(secret) >= 4:
                    reason = reason.replace(secret, "***")
        return reason[:MAX_REASON_CHARS]

    def _refresh_sync(self) -> str:
        from google.auth import exceptions  # noqa: PLC0415

        try:
            if self._credentials is None:
                self._credentials = self._load()
            with httpx.Client(transport=self._transport, timeout=TOKEN_TIMEOUT_S) as client:
                self._credentials.refresh(_HttpxRequest(client))
        except ProviderError:
            raise
        except exceptions.DefaultCredentialsError:
            raise _auth_error(NO_CREDENTIALS) from None
        except (exceptions.GoogleAuthError, ValueError, KeyError) as exc:
            reason = self._reason(exc)
            raise _auth_error(
                f"vertex: credentials refused or unavailable ({type(exc).__name__}"
                + (f": {reason}" if reason else "")
                + ")"
            ) from None
        token = self._credentials.token
        if not isinstance(token, str) or not token:
            raise _auth_error("vertex: the token endpoint answered no access token")
        return token


def credentials_file_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """``GOOGLE_APPLICATION_CREDENTIALS``, when set."""
    value = (env if env is not None else os.environ).get("GOOGLE_APPLICATION_CREDENTIALS")
    return value or None
