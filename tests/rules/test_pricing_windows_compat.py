"""A kernel built against protocol 1.0 keeps working with pricing windows.

The Capabilities of the DeepSeek provider and of the reference provider are encoded by the
current (1.1) classes, decoded with google's classes built from the 1.0 descriptor image
(proto-baseline/protocol-1.0.binpb), stripped of the fields 1.0 does not know (as a 1.0 reader
ignores them), and handed back to the current classes. What the 1.0 kernel sees must pass
``validate_capabilities`` unchanged, and its cost at every instant must be the peak figure: an
upper bound of the 1.1 cost, equal to it outside every window.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from protocol_py.providers.openai.provider import DeepSeekProvider
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.rules.capabilities import validate_capabilities
from protocol_py.rules.cost import cost
from protocol_py.rules.pricing import PricingTable
from protocol_py.version import PROTOCOL_VERSION
from protocol_py_gen.model.v1 import Capabilities, Usage

BASELINE = Path(__file__).resolve().parents[2] / "proto-baseline" / "protocol-1.0.binpb"


def _capabilities_1_0() -> type[Any]:
    """google's Capabilities class of protocol 1.0, from the released descriptor image."""
    files = descriptor_pb2.FileDescriptorSet.FromString(BASELINE.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    cls: type[Any] = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("model.v1.Capabilities")
    )
    return cls


def _providers() -> dict[str, Capabilities]:
    out = {
        "deepseek": DeepSeekProvider(api_key="sk-test").capabilities(),
        "reference": ReferenceProvider().capabilities(),
    }
    for caps in out.values():
        caps.protocol_version = PROTOCOL_VERSION  # as the server fills it in
    return out


def _as_seen_by_1_0(caps: Capabilities) -> Capabilities:
    """The Capabilities a 1.0 kernel works with: 1.1 bytes parsed by the 1.0 schema, unknown
    fields dropped, back in the current classes."""
    old = _capabilities_1_0().FromString(bytes(caps))
    assert "windows" not in {f.name for f in old.DESCRIPTOR.fields_by_name.values()}
    old.DiscardUnknownFields()
    return Capabilities.parse(old.SerializeToString())


@pytest.mark.parametrize("name", ["deepseek", "reference"])
def test_a_1_0_kernel_accepts_the_capabilities_of_a_provider_with_pricing_windows(
    name: str,
) -> None:
    caps = _providers()[name]
    windowed = [m.id for m in caps.models if m.pricing and any(t.windows for t in m.pricing.tiers)]
    assert windowed, "the provider must declare windows for this test to mean anything"
    assert validate_capabilities(caps) == []
    seen = _as_seen_by_1_0(caps)
    assert all(not t.windows for m in seen.models if m.pricing for t in m.pricing.tiers)
    assert validate_capabilities(seen) == []
    assert [m.id for m in seen.models] == [m.id for m in caps.models]


@pytest.mark.parametrize("name", ["deepseek", "reference"])
def test_a_1_0_kernel_bills_the_peak_an_upper_bound_equal_outside_windows(name: str) -> None:
    caps = _providers()[name]
    seen = {m.id: m for m in _as_seen_by_1_0(caps).models}
    usage = Usage(input_tokens=1_000_000, output_tokens=200_000, cache_read_tokens=3_000_000)
    checked = {"inside": 0, "outside": 0}
    for spec in caps.models:
        if spec.pricing is None or not any(t.windows for t in spec.pricing.tiers):
            continue
        caching = bool(spec.caching and spec.caching.supported)
        if not caching:
            usage.cache_read_tokens = 0
        new = PricingTable(spec.pricing)
        old_pricing = seen[spec.id].pricing
        assert old_pricing is not None
        old = PricingTable(old_pricing)
        start = datetime(2026, 8, 17, tzinfo=UTC)  # a Monday, after every price change
        for hour in range(0, 7 * 24):  # every hour of one week
            at = start + timedelta(hours=hour, minutes=30)
            now, then = cost(new, usage, at), cost(old, usage, at)
            assert then.total >= now.total, (spec.id, at)
            if now.window_index is None:
                assert then.total == now.total, (spec.id, at)
                checked["outside"] += 1
            else:
                assert then.total > now.total, (spec.id, at)
                checked["inside"] += 1
        usage.cache_read_tokens = 3_000_000
    assert checked["inside"] > 0 and checked["outside"] > 0, checked


def test_deepseek_flash_as_a_1_0_kernel_bills_it_at_every_hour_the_listed_peak_rates() -> None:
    caps = _as_seen_by_1_0(_providers()["deepseek"])
    spec = next(m for m in caps.models if m.id == "deepseek-flash")
    assert spec.pricing is not None
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cache_read_tokens=1_000_000)
    saturday = datetime(2026, 8, 22, 2, 30, tzinfo=UTC)  # off-peak for a 1.1 kernel
    assert cost(spec.pricing, usage, saturday).total_usd() == "1.506"  # 0.3 + 1.2 + 0.006
