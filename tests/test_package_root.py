"""The package root's namespace: ``dir(protocol_py)`` is its public API."""

from __future__ import annotations

import protocol_py


def test_dir_of_the_package_is_its_public_api() -> None:
    names = dir(protocol_py)
    assert not {"Any", "TYPE_CHECKING", "annotations", "importlib"} & set(names)
    assert set(protocol_py.__all__) <= set(names)
    assert {n for n in names if not n.startswith("__")} == set(protocol_py.__all__)
