"""Token and word counts of long texts of every shape equal the single-pass answers: counting
in fixed slices must not change the result (no whitespace, one huge word, combining marks)."""

from __future__ import annotations

import pytest

from protocol_py.providers.reference.tokenizer import (
    TOKEN_COUNT_CHUNK_CHARS,
    _count_words,
    count_text_tokens,
    tokenize,
)

N = 2 * TOKEN_COUNT_CHUNK_CHARS + 17

SHAPES = {
    "no whitespace": "!" * N,
    "one huge word": "a" * N,
    "one huge space run": " " * N,
    "combining characters": "e\u0301" * (N // 2),
    "word and punctuation": ("ab!" * N)[:N],
    "mixed": ("hello  world, caf\u00e9\t\u00e9\u0301 _x_ 42! " * (N // 30 + 1))[:N],
    "space then word at a cut": " " * TOKEN_COUNT_CHUNK_CHARS + "b" * TOKEN_COUNT_CHUNK_CHARS,
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_slice_counts_equal_the_single_pass_counts(shape: str) -> None:
    text = SHAPES[shape]
    assert count_text_tokens(text) == len(tokenize(text))
    assert _count_words(text) == len(text.split())
