"""Every import path of protocol-py 1.1 keeps working through 1.x.

For each old module path of :data:`protocol_py._moved.MOVED`: importing it works, warns with one
DeprecationWarning (and not again on the next import), and every name the module exported at
1.1 (its ``__all__``; for a module without one, its public top-level definitions, module logger
excluded) is there and is the identical object found in the new module that now holds it. The
modules that became packages (``protocol_py.client``, ``.transport``, ``.cli`` and
``.providers.openai`` / ``.anthropic`` / ``.reference``) export the names they had.

The names are written here as they were in the 1.1 sources (commit 8c63080), not read at run
time, so a name dropped from a new module fails this test. The old paths are imported in a fresh
interpreter: the warning is issued once per process, and an old path imported into this one
would shadow a package attribute of the same name (``protocol_py.accumulate``).
"""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys
import textwrap
from typing import Any, Final

import pytest

from protocol_py._moved import MOVED

OLD_EXPORTS: Final[dict[str, tuple[str, ...]]] = {
    "protocol_py.accumulate": (
        "CONTENT_EVENT_KINDS",
        "AccumulatedResponse",
        "StreamAccumulator",
        "StreamOrderChecker",
        "accumulate",
    ),
    "protocol_py.validation": (
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
    ),
    "protocol_py.validation_memo": (
        "MAX_BYTES",
        "MAX_ENTRIES",
        "MAX_IMAGE_BYTES",
        "MAX_PREFIXES",
        "MAX_PREFIX_BYTES",
        "CleanMessage",
        "ValidState",
        "ValidatedMessages",
        "clean_message",
        "keep_request_images",
        "request_images",
        "settings_of",
        "take_request_images",
        "valid_prefixes",
    ),
    "protocol_py.pricing": (
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
    ),
    "protocol_py.pricing_windows": (
        "DEFAULT_TIME_ZONE",
        "MAX_TIME_ZONE_LENGTH",
        "MAX_WINDOWS_PER_TIER",
        "MINUTES_PER_DAY",
        "MINUTES_PER_WEEK",
        "TierWeek",
        "local_minute_of_week",
        "parse_windows",
        "time_zone",
    ),
    "protocol_py.routing": (
        "Route",
        "Skipped",
        "route",
    ),
    "protocol_py.replay": (
        "continue_paused_turn",
        "is_paused",
    ),
    "protocol_py.vendor_data": (
        "MAX_ENTRIES",
        "MAX_LOCATION_BYTES",
        "MAX_VALUE_BYTES",
        "OPENAI_EXTRA_CONTENT",
        "VendorDataProblem",
        "vendor_data_problems",
    ),
    "protocol_py.wire": (
        "MAX_DECODED_OBJECTS",
        "MAX_FAST_DEPTH",
        "MAX_KEPT_IMAGE_BYTES",
        "DecodeBudgetError",
        "FallbackError",
        "WireCodec",
        "decode",
        "decode_checked",
        "decode_report",
        "encode",
        "encoded_size",
        "field_images",
        "keep_images",
        "mark_decoded",
        "sha256_of",
        "take_images",
        "take_wire_clean",
        "wire_size",
    ),
    "protocol_py.prefix_memo": (
        "BoundedLRU",
        "ConversationPrefixes",
    ),
    "protocol_py.protojson": (
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
    ),
    "protocol_py.structs": (
        "MAX_EXACT_INT",
        "MAX_DEPTH",
        "JSONObject",
        "parse_json_object",
        "check_json",
        "to_struct",
        "from_struct",
        "dumps",
    ),
    "protocol_py.tls": (
        "ALPN_PROTOCOLS",
        "CERT_BACKDATE",
        "CERT_SAN_DNS",
        "CERT_SAN_IP",
        "CERT_VALIDITY",
        "CLIENT_CERT_ENV",
        "MAX_CERT_PEM_BYTES",
        "KeyPair",
        "TLSConfigError",
        "auto_mtls_server_context",
        "client_context",
        "generate_certificate",
        "load_key_pair",
        "parse_client_certificate",
        "pinned_client_context",
        "server_context",
    ),
    "protocol_py.launch": (
        "START_TIMEOUT",
        "STOP_TIMEOUT",
        "LaunchError",
        "LaunchedPlugin",
        "launch",
    ),
    "protocol_py.serving": (
        "DEFAULT_LOG_LEVEL",
        "LOG_LEVELS",
        "ServeError",
        "configure_logging",
        "handshake_line",
        "serve",
        "serve_async",
        "watch_stdin_eof",
    ),
    "protocol_py.offload": (
        "GC_QUIET_MIN_BYTES",
        "MAX_CPU_JOBS",
        "OFFLOAD_MIN_BYTES",
        "POOL_START_TIMEOUT_S",
        "RELEASE_STEP_ITEMS",
        "SWITCH_INTERVAL_S",
        "release_in_steps",
        "release_large",
        "run_cpu",
        "run_released",
        "start_workers",
    ),
    "protocol_py.sse": (
        "MAX_SSE_EVENT_BYTES",
        "MAX_SSE_LINE_BYTES",
        "SSEEvent",
        "SSELimitError",
        "SSEParser",
        "aiter_sse",
    ),
    "protocol_py.conversation": (
        "DEFAULT_CONTEXT_PROVIDER",
        "Conversation",
        "document",
        "image",
        "new_id",
        "text",
        "tool",
    ),
    "protocol_py.message_reader": (
        "MAX_BATCH_BYTES",
        "MessageReader",
    ),
    "protocol_py.chat": (
        "CAPABILITIES_TIMEOUT",
        "EXIT_CANCELLED",
        "MAX_PAUSE_CONTINUATIONS",
        "MAX_PROMPT_BYTES",
        "MAX_TOOLS_FILE_BYTES",
        "PAUSE_MARKER",
        "ChatError",
        "ChatOptions",
        "chat_interactive",
        "chat_once",
        "load_tools",
        "read_prompt",
    ),
    "protocol_py.server.admission": (
        "MIN_USABLE_DEADLINE",
        "MODEL_SERVICE_PREFIX",
        "AdmissionHandler",
        "refusal",
    ),
    "protocol_py.server.cardinality": (
        "EXTRA_MESSAGE",
        "HALF_CLOSE_WAIT",
        "NO_MESSAGE",
        "REQUEST_READ_ATTR",
        "SingleRequest",
        "receive_single",
    ),
    "protocol_py.server.connections": (
        "SEND_CHECKPOINT_INTERVAL",
        "DEFAULT_RECEIVE_TIMEOUT",
        "MEMORY_TRIM_INTERVAL",
        "LARGE_CALL_BYTES",
        "DEADLINE_RESET_MARGIN",
        "DEFAULT_HANDSHAKE_TIMEOUT",
        "HTTP2_PREFACE_BYTES",
        "DEFAULT_IDLE_TIMEOUT",
        "receive_timeout_message",
        "checkpoint",
        "send_events",
        "cancel_outcome",
        "MemoryTrimmer",
        "TransportHandler",
        "close_connection",
        "protocol_factory",
        "TransportProtocol",
    ),
    "protocol_py.server.limits": (
        "DEFAULT_MAX_MESSAGE_SIZE",
        "parse_size",
        "EncodedReply",
        "encode_reply",
        "LimitedCodec",
        "PROTOBUF_MAX_DEPTH",
        "REQUEST_TYPES",
        "strict_request_classes",
        "receive_message",
        "wrong_wire_type",
        "fill_struct_gaps",
        "decode_request",
        "MAX_FALLBACK_BYTES",
    ),
    "protocol_py.server.large_body": (
        "ASSEMBLE_MIN_BYTES",
        "RECEIVE_PIECE_BYTES",
        "BytesBuilder",
        "receive_body",
    ),
    "protocol_py.server.strict_parse": (
        "STRICT_ELIDE_FIELD_BYTES",
        "STRICT_ELIDE_MIN_BYTES",
        "UTF8_CHECK_CHUNK_BYTES",
        "strict_parse",
    ),
    "protocol_py.server.batching": (
        "MAX_PENDING_BYTES",
        "MAX_PENDING_EVENTS",
        "EventWriter",
    ),
    "protocol_py.server.reply_budget": (
        "HELD_COPIES",
        "LARGE_REPLY_BYTES",
        "REPLY_BUDGET_BYTES",
        "ReplyBudget",
    ),
}

OLD_PACKAGE_EXPORTS: Final[dict[str, tuple[str, ...]]] = {
    "protocol_py.client": (
        "Completion",
        "ModelClient",
        "parse_address",
    ),
    "protocol_py.transport": (
        "DEFAULT_HOST",
        "DEFAULT_PORT",
        "EXIT_ON_STDIN_EOF_ENV",
        "HANDSHAKE_PROTOCOL",
        "LOOPBACK_NAMES",
        "MAX_HANDSHAKE_LINE_BYTES",
        "MAX_UNIX_PATH_BYTES",
        "PRIVATE_DIR_MODE",
        "PRIVATE_DIR_PREFIX",
        "SOCKET_MODE",
        "SOCKET_NAME",
        "STALE_PROBE_TIMEOUT",
        "Handshake",
        "ListenSpec",
        "SocketIdentity",
        "add_client_options",
        "add_serve_options",
        "bind_unix_socket",
        "check_socket_path",
        "client_ssl_from_options",
        "format_handshake",
        "handshake_line",
        "is_private_socket_dir",
        "listen_spec",
        "make_private_socket_path",
        "parse_handshake",
        "remove_socket",
        "socket_identity",
    ),
    "protocol_py.cli": (
        "EXIT_OK",
        "EXIT_FAILURE",
        "EXIT_USAGE",
        "CliError",
        "build_parser",
        "main",
        "cmd_serve",
        "DEFAULT_TIMEOUT",
        "CONNECT_TIMEOUT",
        "cmd_chat",
        "TABLE_WIDTH",
        "capabilities_table",
        "cmd_capabilities",
        "cmd_describe",
        "cmd_version",
        "cmd_validate",
        "cmd_cost",
    ),
    "protocol_py.providers.openai": (
        "DeepSeekProvider",
        "OpenAIProvider",
    ),
    "protocol_py.providers.anthropic": (
        "ANTHROPIC_VERSION",
        "AnthropicProvider",
    ),
    "protocol_py.providers.reference": (
        "LARGE",
        "MEDIUM",
        "SMALL",
        "FRAGMENT_CHARS",
        "TOKENS_PER_DELTA",
        "CACHE_ENTRIES",
        "CACHE_BYTES",
        "CACHE_ENTRY_OVERHEAD_BYTES",
        "MAX_RENDER_CHARS",
        "MARKDOWN_ESCAPE_CHUNK_CHARS",
        "markdown_escape",
        "MAX_REPEAT_PAYLOAD_BYTES",
        "CONFIG_SCHEMA",
        "tokenize",
        "TOKEN_COUNT_CHUNK_CHARS",
        "count_text_tokens",
        "count_parts_tokens",
        "PromptSegment",
        "prompt_segments",
        "reference_models",
        "MAX_EXAMPLE_STRING_CHARS",
        "SIGNATURE_LOCATION",
        "SIGNED_CALL_PREFIX",
        "ReferenceProvider",
    ),
}


PROBE = textwrap.dedent(
    """
    import importlib, inspect, json, sys, warnings

    from protocol_py._moved import MOVED

    names = json.loads(sys.argv[1])
    results = {}
    for old, exported in names.items():
        with warnings.catch_warnings(record=True) as first:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
        with warnings.catch_warnings(record=True) as again:
            warnings.simplefilter("always")
            importlib.import_module(old)
        targets = [importlib.import_module(name) for name in MOVED[old]]
        missing, different, left_behind = [], [], []
        for name in exported:
            if not hasattr(module, name):
                missing.append(name)
                continue
            obj = getattr(module, name)
            if not any(getattr(t, name, None) is obj for t in targets if hasattr(t, name)):
                different.append(name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ == old:
                left_behind.append(name)
        results[old] = {
            "first": [
                str(w.message) for w in first if issubclass(w.category, DeprecationWarning)
            ],
            "again": [
                str(w.message) for w in again if issubclass(w.category, DeprecationWarning)
            ],
            "all": list(module.__all__),
            "missing": missing,
            "different": different,
            "left_behind": left_behind,
        }
    print(json.dumps(results))
    """
)


@pytest.fixture(scope="module")
def imported() -> dict[str, dict[str, Any]]:
    """What importing every old path did, in one fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps({k: list(v) for k, v in OLD_EXPORTS.items()})],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results: dict[str, dict[str, Any]] = json.loads(done.stdout)
    return results


def test_every_moved_path_is_pinned_here() -> None:
    assert sorted(MOVED) == sorted(OLD_EXPORTS)


@pytest.mark.parametrize("old", sorted(OLD_EXPORTS))
def test_old_path_warns_once_and_exports_the_same_objects(
    imported: dict[str, dict[str, Any]], old: str
) -> None:
    result = imported[old]
    assert len(result["first"]) == 1, result["first"]
    assert result["first"][0].startswith(f"{old} is deprecated; import from {MOVED[old][0]}")
    assert "removed in 2.0" in result["first"][0]
    assert result["again"] == []
    assert result["missing"] == []
    assert result["different"] == []
    assert result["left_behind"] == []
    assert set(OLD_EXPORTS[old]) <= set(result["all"])


CLI_OPTIONS: Final = "protocol_py.cli.options"
CLI_OPTION_NAMES: Final = frozenset(
    {"add_client_options", "add_serve_options", "client_ssl_from_options"}
)
"""Names the 1.1 module ``protocol_py.transport`` had that now live with the CLI's options."""


@pytest.mark.parametrize("package", sorted(OLD_PACKAGE_EXPORTS))
def test_module_that_became_a_package_exports_the_same_names(package: str) -> None:
    module = importlib.import_module(package)
    assert set(OLD_PACKAGE_EXPORTS[package]) <= set(module.__all__)
    for name in OLD_PACKAGE_EXPORTS[package]:
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            home = CLI_OPTIONS if name in CLI_OPTION_NAMES else package
            assert obj.__module__.startswith(home), (name, obj.__module__)
