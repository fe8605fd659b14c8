"""The provider contract (:mod:`protocol_py.provider`): a provider without a ``name`` is named
after its class."""

from __future__ import annotations

from typing import Any

import pytest

from protocol_py.provider import Provider
from protocol_py.server import ModelServer
from protocol_py_gen.model.v1 import Capabilities


class Nameless(Provider):
    def capabilities(self) -> Capabilities:
        return Capabilities()

    async def stream(self, request: Any, context: Any) -> Any:
        raise NotImplementedError


class Named(Nameless):
    name = "named"


class ChildOfNamed(Named):
    pass


async def test_a_provider_without_a_name_is_named_after_its_class() -> None:
    assert (Nameless.name, Named.name, ChildOfNamed.name) == ("Nameless", "named", "named")
    assert Nameless().describe().name == "Nameless"
    with pytest.raises(ValueError, match="invalid capabilities of provider 'Nameless'"):
        await ModelServer(Nameless()).start("127.0.0.1", 0)
