"""Bytes and JSON for the generated messages: the fast protobuf wire codec, proto3 JSON and
``google.protobuf.Struct`` conversion."""
