"""Token and word counts of long texts of every shape equal the single-pass answers: counting
in fixed slices must not change the result (no whitespace, one huge word, combining marks). A
count bounded by a context window is exact up to the bound and a lower bound past it."""

from __future__ import annotations

import pytest

from protocol_py.providers.reference.tokenizer import (
    TOKEN_COUNT_CHUNK_CHARS,
    TOKEN_SLICE_CHARS,
    _count_words,
    count_prompt_tokens,
    count_text_tokens,
    tokenize,
)
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock

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


def _message(text: str) -> Message:
    return Message(role=Role.USER, content=[ContentBlock(text=TextBlock(text=text))])


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_bounded_prompt_count_is_exact_within_the_bound_and_a_lower_bound_past_it(
    shape: str,
) -> None:
    messages = [_message(SHAPES[shape]), _message("tail words")]
    exact, whole = count_prompt_tokens(messages, [], [])
    assert whole
    assert count_prompt_tokens(messages, [], [], stop_above=exact) == (exact, True)
    bound = TOKEN_SLICE_CHARS // 2
    counted, whole = count_prompt_tokens(messages, [], [], stop_above=bound)
    if exact <= bound:
        assert (counted, whole) == (exact, True)
    else:
        assert bound < counted <= exact
        if whole:
            assert counted == exact
        if exact > 2 * TOKEN_SLICE_CHARS:
            assert not whole  # stopped within the first slices of the long message
