"""The vendor providers' HTTP clients: one current client, retired ones closed when idle.

Configure with a new ``base_url`` or key retires the current :class:`httpx.AsyncClient` (its
connection pool belongs to the old settings); calls already running keep using it. A retired
client kept open until the provider closed would hold memory per Configure, without bound, so
each call holds a lease (:meth:`ClientPool.lease`) and a retired client is closed as soon as its
last lease ends, at once when it has none; at most :data:`MAX_RETIRED_CLIENTS` retired clients stay
open (beyond that the oldest is closed, its calls end with a TRANSIENT transport error).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Final

import httpx

from protocol_py.providers.http.cancel import shielded

__all__ = ["MAX_RETIRED_CLIENTS", "ClientPool"]

MAX_RETIRED_CLIENTS: Final = 32
"""Most retired HTTP clients kept open for the calls still using them (count); a Configure that
would retire one more closes the oldest first."""


class ClientPool:
    """The current client (created on first use by ``factory``) and the retired ones in use."""

    def __init__(self, factory: Callable[[], httpx.AsyncClient]) -> None:
        self._factory = factory
        self._current: httpx.AsyncClient | None = None
        self._leases: dict[httpx.AsyncClient, int] = {}
        self._retired: list[httpx.AsyncClient] = []

    @property
    def retired(self) -> tuple[httpx.AsyncClient, ...]:
        """The retired clients still open (oldest first)."""
        return tuple(self._retired)

    def current(self) -> httpx.AsyncClient:
        """The client for new calls (created when there is none)."""
        if self._current is None:
            self._current = self._factory()
        return self._current

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[httpx.AsyncClient]:
        """Use the current client for one call; a client retired meanwhile is closed when its
        last lease ends."""
        client = self.current()
        self._leases[client] = self._leases.get(client, 0) + 1
        try:
            yield client
        finally:
            left = self._leases.pop(client) - 1
            if left:
                self._leases[client] = left
            elif client in self._retired:
                self._retired.remove(client)
                await shielded(client.aclose())

    async def retire(self) -> None:
        """Retire the current client: closed now when no call uses it, else when the last
        one ends (at most :data:`MAX_RETIRED_CLIENTS` kept; the oldest is closed first)."""
        client, self._current = self._current, None
        if client is None:
            return
        if not self._leases.get(client):
            await client.aclose()
            return
        self._retired.append(client)
        while len(self._retired) > MAX_RETIRED_CLIENTS:
            await self._retired.pop(0).aclose()

    async def aclose(self) -> None:
        """Close every client, current and retired."""
        clients = [*self._retired, *([self._current] if self._current is not None else [])]
        self._current = None
        self._retired = []
        for client in clients:
            await client.aclose()
