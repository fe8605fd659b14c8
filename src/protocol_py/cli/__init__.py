"""The ``protocol-py`` command line: ``serve``, ``chat``, ``describe``, ``capabilities``,
``validate``, ``cost`` and ``version``."""

from protocol_py.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
