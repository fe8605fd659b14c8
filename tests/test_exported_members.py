"""The public surface of the package root and of each subpackage is its ``__all__``, pinned here
name by name: adding, removing or renaming an export is a visible change of this file. Every
name listed resolves on its module, and none is listed twice.
"""

from __future__ import annotations

import importlib
from typing import Final

import pytest

EXPORTED: Final[dict[str, list[str]]] = {
    "protocol_py": [
        "PACKAGE_VERSION",
        "PROTOCOL_VERSION",
        "Completion",
        "Conversation",
        "InvalidValueError",
        "ModelClient",
        "ModelServer",
        "ProtocolError",
        "Provider",
        "ProviderError",
        "ServeError",
        "StreamAccumulator",
        "ValidationError",
        "accumulate",
        "cost",
        "route",
        "serve",
        "serve_async",
    ],
    "protocol_py.rules": [],
    "protocol_py.codec": [],
    "protocol_py.transport": [
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
        "unix_socket_path",
    ],
    "protocol_py.server": [
        "CANCEL_REDELIVERY_S",
        "DEFAULT_GRACE_PERIOD",
        "DEFAULT_HANDSHAKE_TIMEOUT",
        "DEFAULT_HOST",
        "DEFAULT_IDLE_TIMEOUT",
        "DEFAULT_MAX_MESSAGE_SIZE",
        "DEFAULT_PORT",
        "DEFAULT_RECEIVE_TIMEOUT",
        "FINAL_EVENT_TIMEOUT",
        "HALF_CLOSE_WAIT",
        "HELD_COPIES",
        "LARGE_CALL_BYTES",
        "LARGE_REPLY_BYTES",
        "MEMORY_TRIM_INTERVAL",
        "PROTOBUF_MAX_DEPTH",
        "REPLY_BUDGET_BYTES",
        "REQUEST_TYPES",
        "RPC_RECORD_ATTR",
        "RPC_RECORD_BURST",
        "RPC_RECORD_INTERVAL",
        "SECRET_KEY_RE",
        "SEND_CHECKPOINT_INTERVAL",
        "SERVICE_NAME",
        "SHUTDOWN_LINGER",
        "DrainableStatus",
        "EncodedReply",
        "LimitedCodec",
        "LogFormatter",
        "MemoryTrimmer",
        "ModelServer",
        "RecordLimit",
        "ReplyBudget",
        "RpcRecord",
        "ServerLifecycle",
        "TransportHandler",
        "TransportProtocol",
        "build_descriptor_pool",
        "classify_exception",
        "close_connection",
        "config_format_checker",
        "decode_request",
        "encode_reply",
        "fill_missing_values",
        "find_descriptor_image",
        "invalid_request_event",
        "json_pointer",
        "loose_objects",
        "parse_size",
        "receive_message",
        "redact",
        "send_events",
        "strict_request_classes",
        "unary_error",
        "unknown_model",
        "validate_config",
    ],
    "protocol_py.providers": [
        "BUILTIN",
        "ENTRY_POINT_GROUP",
        "MAX_SPEC_CHARS",
        "ProviderLoadError",
        "installed_providers",
        "load_provider_class",
        "provider_class",
    ],
    "protocol_py.client": [
        "Completion",
        "ModelClient",
        "parse_address",
    ],
    "protocol_py.cli": [
        "CONNECT_TIMEOUT",
        "DEFAULT_TIMEOUT",
        "EXIT_FAILURE",
        "EXIT_OK",
        "EXIT_USAGE",
        "TABLE_WIDTH",
        "CliError",
        "build_parser",
        "capabilities_table",
        "cmd_capabilities",
        "cmd_chat",
        "cmd_cost",
        "cmd_describe",
        "cmd_serve",
        "cmd_validate",
        "cmd_version",
        "main",
    ],
    "protocol_py.providers.openai": [
        "DeepSeekProvider",
        "OpenAIProvider",
    ],
    "protocol_py.providers.anthropic": [
        "ANTHROPIC_VERSION",
        "AnthropicProvider",
    ],
    "protocol_py.providers.reference": [
        "CACHE_BYTES",
        "CACHE_ENTRIES",
        "CACHE_ENTRY_OVERHEAD_BYTES",
        "CONFIG_SCHEMA",
        "FRAGMENT_CHARS",
        "LARGE",
        "MARKDOWN_ESCAPE_CHUNK_CHARS",
        "MAX_EXAMPLE_STRING_CHARS",
        "MAX_RENDER_CHARS",
        "MAX_REPEAT_PAYLOAD_BYTES",
        "MEDIUM",
        "SIGNATURE_LOCATION",
        "SIGNED_CALL_PREFIX",
        "SMALL",
        "TOKENS_PER_DELTA",
        "TOKEN_COUNT_CHUNK_CHARS",
        "PromptSegment",
        "ReferenceProvider",
        "count_parts_tokens",
        "count_text_tokens",
        "markdown_escape",
        "prompt_segments",
        "reference_models",
        "tokenize",
    ],
}


@pytest.mark.parametrize("module_name", sorted(EXPORTED))
def test_all_is_the_pinned_list(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), sorted(exported)
    assert sorted(exported) == sorted(EXPORTED[module_name])


@pytest.mark.parametrize("module_name", sorted(EXPORTED))
def test_every_exported_name_resolves(module_name: str) -> None:
    module = importlib.import_module(module_name)
    missing = [name for name in EXPORTED[module_name] if not hasattr(module, name)]
    assert missing == []


def test_star_import_gives_exactly_the_root_exports() -> None:
    namespace: dict[str, object] = {}
    exec("from protocol_py import *", namespace)
    namespace.pop("__builtins__")
    assert sorted(namespace) == sorted(EXPORTED["protocol_py"])
