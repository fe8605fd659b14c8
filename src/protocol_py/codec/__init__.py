"""Bytes and JSON for the generated messages: the fast protobuf wire codec, proto3 JSON and
``google.protobuf.Struct`` conversion."""

__all__: list[str] = []
"""Nothing at the package level: import the concern's module (its own ``__all__``)."""
