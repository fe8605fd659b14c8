"""Opaque vendor data on tool calls (protocol 1.1) and text blocks (protocol 1.2):
``content.v1.VendorData``.

A vendor may attach data to one tool call that it requires back, unmodified, on the next turn:
Gemini 3 signs each function call with a ``thought_signature`` and answers 400 when it is
missing (on its OpenAI-compatible endpoint it arrives as ``tool_calls[i].extra_content`` =
``{"google": {"thought_signature": "..."}}``). The protocol carries such data as a list of
``VendorData{location, value}`` on ``ToolCallStart`` (known when the call opens), on
``ToolCallDone`` (arrived later) and, accumulated in that order, on ``ToolUseBlock``.

``location`` names where on the vendor's wire the value was found and where the adapter that
produced it sends it back (:data:`OPENAI_EXTRA_CONTENT`); ``value`` is the vendor's value
verbatim (for a JSON location, the compact UTF-8 text of the JSON value, member order kept).
Neither the kernel nor another vendor's adapter interprets it: an adapter replays the locations
it produces and ignores the others.

Protocol 1.2 puts the same entries on text: ``TextDelta.vendor_data`` (sent with the delta on
which the vendor delivered it) accumulates into ``TextBlock.vendor_data`` of the block the delta
lands on, for Gemini's thought signature on a text part (:data:`GEMINI_PART_THOUGHT_SIGNATURE`)
and Anthropic's citations on a text block (:data:`ANTHROPIC_TEXT_CITATIONS`). The rules are the
same, counted per text block; the stream checker prefixes them with
``stream.text_delta.vendor_data.``, request validation with
``request.content.text.vendor_data.``.

Rules (:func:`vendor_data_problems`; the stream checker prefixes the ids with
``stream.tool_call.vendor_data.``, request validation with
``request.content.tool_use.vendor_data.``):

- ``location_empty``: an entry without a location
- ``location_invalid``: a location longer than :data:`MAX_LOCATION_BYTES` or with characters
  outside ``[a-z0-9_.]``
- ``value_empty``: an entry without a value
- ``value_too_large``: a value longer than :data:`MAX_VALUE_BYTES`
- ``location_duplicate``: a second entry for one location on one call (the start's and the
  done's entries count together) or one text block (every delta's entries count together)
- ``too_many``: more than :data:`MAX_ENTRIES` entries on one call or text block
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final, NamedTuple

from protocol_py_gen.content.v1 import VendorData

__all__ = [
    "ANTHROPIC_TEXT_CITATIONS",
    "GEMINI_PART_THOUGHT_SIGNATURE",
    "MAX_ENTRIES",
    "MAX_LOCATION_BYTES",
    "MAX_VALUE_BYTES",
    "OPENAI_EXTRA_CONTENT",
    "VendorDataProblem",
    "vendor_data_problems",
]

MAX_VALUE_BYTES: Final = 65_536
"""Largest ``VendorData.value``, in bytes (Gemini's thought signatures have no fixed size;
recorded ones run to about 6 KB)."""

MAX_LOCATION_BYTES: Final = 128
"""Longest ``VendorData.location``, in bytes."""

MAX_ENTRIES: Final = 8
"""Most ``VendorData`` entries on one tool call (start and done together) or one text block."""

OPENAI_EXTRA_CONTENT: Final = "openai.tool_call.extra_content"
"""Location of the ``extra_content`` object of an OpenAI-compatible ``tool_calls[]`` entry
(Gemini's ``{"google": {"thought_signature": ...}}``); the value is that object's JSON text."""

GEMINI_PART_THOUGHT_SIGNATURE: Final = "gemini.part.thought_signature"
"""Location of the ``thoughtSignature`` of a Gemini ``parts[]`` entry that holds text (protocol
1.2, on ``TextBlock``); the value is the signature string's UTF-8 bytes, never base64-decoded."""

ANTHROPIC_TEXT_CITATIONS: Final = "anthropic.text.citations"
"""Location of the ``citations`` array of an Anthropic ``text`` content block (protocol 1.2, on
``TextBlock``); the value is the array's compact JSON text, member order kept."""

_LOCATION = re.compile(r"[a-z0-9_.]+")
_SHOWN_CHARS: Final = 40
"""How much of a bad location an error message quotes, in characters."""


class VendorDataProblem(NamedTuple):
    """One broken rule: the index of the entry in the list it was checked in, the rule suffix (see
    the module docstring) and a message that quotes at most 40 characters of the location."""

    entry: int
    rule: str
    message: str


def _shown(location: str) -> str:
    if len(location) <= _SHOWN_CHARS:
        return repr(location)
    return repr(location[:_SHOWN_CHARS]) + f"... ({len(location)} characters)"


def vendor_data_problems(
    entries: Sequence[VendorData], earlier: Iterable[VendorData] = (), *, item: str = "tool call"
) -> list[VendorDataProblem]:
    """Check the vendor data of one tool call or one text block.

    Args:
        entries: The entries to check (a ToolCallStart's, a ToolCallDone's, a ToolUseBlock's, a
            TextDelta's or a TextBlock's).
        earlier: Entries of the same call or block already accepted (the ToolCallStart's when
            checking its ToolCallDone, the earlier deltas' of a text block): their locations
            count for ``location_duplicate`` and their number for ``too_many``.
        item: What the entries belong to, as the messages name it ("tool call", "text block").

    Returns:
        Every problem, in entry order; empty when the entries are valid.
    """
    problems: list[VendorDataProblem] = []
    seen = {entry.location for entry in earlier}
    total = len(seen)
    for index, entry in enumerate(entries):
        location, value = entry.location, entry.value
        if not location:
            problems.append(VendorDataProblem(index, "location_empty", "location is empty"))
        elif len(location.encode()) > MAX_LOCATION_BYTES or not _LOCATION.fullmatch(location):
            problems.append(
                VendorDataProblem(
                    index,
                    "location_invalid",
                    f"location {_shown(location)} must be at most {MAX_LOCATION_BYTES} bytes "
                    "of [a-z0-9_.]",
                )
            )
        elif location in seen:
            problems.append(
                VendorDataProblem(
                    index,
                    "location_duplicate",
                    f"location {_shown(location)} appears twice on one {item}",
                )
            )
        seen.add(location)
        if not value:
            problems.append(VendorDataProblem(index, "value_empty", "value is empty"))
        elif len(value) > MAX_VALUE_BYTES:
            problems.append(
                VendorDataProblem(
                    index,
                    "value_too_large",
                    f"value is {len(value)} bytes, above the limit of {MAX_VALUE_BYTES}",
                )
            )
    total += len(entries)
    if total > MAX_ENTRIES:
        problems.append(
            VendorDataProblem(
                len(entries) - 1,
                "too_many",
                f"{total} vendor data entries on one {item}, above the limit of {MAX_ENTRIES}",
            )
        )
    return problems
