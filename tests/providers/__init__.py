"""Tests for the SSE reader and the vendor adapters (issue 5)."""
