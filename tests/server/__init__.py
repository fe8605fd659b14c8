"""Tests of the reference server adapter, the reference provider, the client and the CLI."""
