"""The 1.1 module paths kept by ``protocol_py._moved``: each still imports, warns once, and
re-exports the very objects of the modules that now hold them. A path whose module was split
into several lists all of them, so every name of its 1.1 ``__all__`` is still there.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

from protocol_py._moved import MOVED, public_names
from protocol_py.rules import request as request_rules

# ``__all__`` of the split modules in protocol-py 1.1: the surface their old paths keep.
SPLIT_1_1 = {
    "protocol_py.validation": {
        "PORTABLE_SCHEMA_KEYWORDS",
        "decode_json",
        "decode_json_or_raise",
        "detect_kind",
        "load_document",
        "validate_capabilities",
        "validate_config_schema",
        "validate_document",
        "validate_model_spec",
        "validate_request",
        "validate_request_shape",
        "violations_capped",
    },
    "protocol_py.pricing": {
        "RATE_FIELDS",
        "TERM_NAMES",
        "CostBreakdown",
        "PricingTable",
        "cost",
        "format_usd",
        "parse_timestamp",
        "prompt_tokens",
        "validate_pricing",
        "validate_usage",
    },
    "protocol_py.accumulate": {
        "CONTENT_EVENT_KINDS",
        "AccumulatedResponse",
        "StreamAccumulator",
        "StreamOrderChecker",
        "accumulate",
    },
    "protocol_py.protojson": {
        "check_message",
        "decode",
        "decode_lenient",
        "decode_or_raise",
        "dumps",
        "encode",
        "field_keys",
        "json_name",
        "json_type",
        "with_defaults",
    },
}


def import_old(path: str, monkeypatch: pytest.MonkeyPatch) -> tuple[object, list[str]]:
    """A fresh import of the old ``path`` and the DeprecationWarning texts it raised."""
    monkeypatch.delitem(sys.modules, path, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(path)
    texts = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    return module, texts


@pytest.mark.parametrize("path", sorted(MOVED))
def test_an_old_path_reexports_the_objects_of_its_new_modules(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, texts = import_old(path, monkeypatch)
    assert len(texts) == 1
    assert texts[0].startswith(f"{path} is deprecated; import from {MOVED[path][0]}")
    assert all(new in texts[0] for new in MOVED[path])
    targets = [importlib.import_module(new) for new in MOVED[path]]
    exported: list[str] = list(old.__all__)  # type: ignore[attr-defined]
    assert exported
    assert len(set(exported)) == len(exported)
    for target in targets:
        assert set(public_names(target)) <= set(exported), target.__name__
        for name in public_names(target):
            owner = next(t for t in targets if name in public_names(t))
            assert getattr(old, name) is getattr(owner, name), (path, name)


@pytest.mark.parametrize("path", sorted(SPLIT_1_1))
def test_a_split_module_keeps_its_1_1_names(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    old, _ = import_old(path, monkeypatch)
    assert len(MOVED[path]) > 1  # split: its names now live in several modules
    assert SPLIT_1_1[path] <= set(old.__all__)  # type: ignore[attr-defined]
    homes = {}
    for name in SPLIT_1_1[path]:
        owners = [new for new in MOVED[path] if name in public_names(importlib.import_module(new))]
        assert len(owners) == 1, (name, owners)  # one home, no name exported twice
        homes[name] = owners[0]
        assert getattr(old, name) is getattr(importlib.import_module(owners[0]), name)
    assert set(homes.values()) == set(MOVED[path])  # every listed module holds some of them


def test_a_private_name_of_a_split_module_is_still_reached() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("protocol_py.validation")
    assert old._validate_request is request_rules._validate_request  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        old.no_such_name  # type: ignore[attr-defined]  # noqa: B018
