"""A received DATA frame's repr is hyperframe's text, computed without copying the payload
(:mod:`protocol_py._compat.hyperframe_frame_repr`; that the client and the server install it is
pinned by ``tests/compat/test_install.py``)."""

from __future__ import annotations

import timeit

import pytest
from hyperframe.frame import DataFrame, _raw_data_repr

from protocol_py._compat import hyperframe_frame_repr as h2_frame_repr


def hyperframe_repr(frame: DataFrame) -> str:
    """What hyperframe 6.1.0 prints: the whole serialized body, hex-encoded, then cut."""
    return _raw_data_repr(frame.serialize_body())


def frame(data: bytes, pad: int | None = None) -> DataFrame:
    made = DataFrame(1, data=data)
    if pad is not None:
        made.flags.add("PADDED")
        made.pad_length = pad
    return made


@pytest.mark.parametrize(
    ("data", "pad"),
    [
        (b"", None),
        (b"a", None),
        (b"0123456789", None),  # exactly the 20 hex digits shown: no "..."
        (b"0123456789a", None),  # one more byte: "..."
        (b"\x00\xff" * 20_000, None),
        (b"", 0),
        (b"", 3),
        (b"abc", 12),
        (b"x" * 64, 5),
    ],
)
def test_the_repr_text_is_hyperframes(data: bytes, pad: int | None) -> None:
    assert h2_frame_repr.install()
    made = frame(data, pad)
    assert made._body_repr() == hyperframe_repr(made)
    assert repr(made).endswith(hyperframe_repr(made))


def test_a_large_frame_repr_does_not_copy_the_payload() -> None:
    large = frame(b"x" * (1 << 20))
    cheap = min(timeit.repeat(lambda: repr(large), number=20, repeat=3)) / 20
    full = min(timeit.repeat(lambda: hyperframe_repr(large), number=20, repeat=3)) / 20
    print(f"1 MiB DATA frame repr: {cheap * 1e6:.1f} us (hyperframe's: {full * 1e6:.1f} us)")
    assert cheap * 20 < full  # generous: measured about 1000x on a quiet machine
