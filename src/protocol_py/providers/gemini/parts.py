"""What the gemini and vertex adapters keep of a Gemini ``parts[]`` entry between turns.

Two ``VendorData`` locations (protocol 1.1 on tool calls, 1.2 on text blocks), written by the
stream translator and read back by the request builder, both owned by these two adapters:

- :data:`THOUGHT_SIGNATURE` (``gemini.part.thought_signature``): the part's
  ``thoughtSignature`` string, its UTF-8 bytes exactly as received (never base64-decoded or
  re-encoded). On a ``ToolUseBlock`` for a ``functionCall`` part (Gemini signs the first call of
  a step, and only that one); on a ``TextBlock`` for a text part (Gemini 2.5 signs the first text
  part after its thoughts, Gemini 3 often the last, empty part of a turn).
- :data:`FUNCTION_CALL_ID` (``gemini.function_call.id``): the ``functionCall.id`` the vendor
  sent (Gemini 3 sends one; 2.x none), kept whenever it names one call of its response
  unambiguously. The ToolUseBlock's own id comes from the shared
  :class:`~protocol_py.providers.http.call_ids.CallIds` (prefix :data:`CALL_ID_PREFIX`): the
  vendor's id when it is unique in the conversation, otherwise a fresh ULID id, never a
  per-stream counter. Only an id recorded here is ever sent back to the vendor (a synthetic id
  never is).

Signatures are valid only for the model family that made them (Google: "model family and
tier"): :func:`signature_family` names the family of a model id, and a signature is replayed
only to a model of the same family.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from protocol_py_gen.content.v1 import VendorData

__all__ = [
    "CALL_ID_PREFIX",
    "FUNCTION_CALL_ID",
    "PROVIDER_NAMES",
    "SKIP_SIGNATURE",
    "THOUGHT_SIGNATURE",
    "signature_family",
    "vendor_value",
]

THOUGHT_SIGNATURE: Final = "gemini.part.thought_signature"
"""Location of a part's ``thoughtSignature`` (value: the signature string's UTF-8 bytes)."""

FUNCTION_CALL_ID: Final = "gemini.function_call.id"
"""Location of the vendor's own ``functionCall.id`` (value: the id's UTF-8 bytes)."""

CALL_ID_PREFIX: Final = "gemini_"
"""Prefix of the tool-call ids the adapter makes up (``gemini_<ULID>``) when the vendor sent
none, or one the conversation already uses."""

SKIP_SIGNATURE: Final = "skip_thought_signature_validator"
"""The stand-in signature Google documents for a function call that has none (a call injected
by the kernel or carried over from another model), on a Gemini 3 model that validates the
current turn's calls (ai.google.dev/gemini-api/docs/thought-signatures)."""

PROVIDER_NAMES: Final = frozenset({"gemini", "vertex"})
"""The provider names whose signatures these adapters replay: the same models behind two
APIs."""

_FAMILY = re.compile(r"^(?:models/)?gemini-(\d+)(?:\.\d+)?-(pro|flash-lite|flash)\b")


def signature_family(model_id: str | None) -> str | None:
    """The signature family of a model id: major version and tier, e.g. ``gemini-3:pro``
    for both ``gemini-3-pro-preview`` and ``gemini-3.1-pro-preview`` (the first is answered by
    the second). None when the id is not a recognised Gemini model (or absent)."""
    if not model_id:
        return None
    match = _FAMILY.match(model_id)
    if match is None:
        return None
    major, tier = match.groups()
    if major == "2":  # 2.0 and 2.5 differ: keep the minor for the 2.x line
        minor = model_id.removeprefix("models/").split("-")[1]
        return f"gemini-{minor}:{tier}"
    return f"gemini-{major}:{tier}"


def vendor_value(entries: Iterable[VendorData], location: str) -> str | None:
    """The UTF-8 text of the entry at ``location``, or None (absent or not UTF-8)."""
    for entry in entries:
        if entry.location == location and entry.value:
            try:
                return entry.value.decode("utf-8")
            except UnicodeDecodeError:
                return None
    return None
