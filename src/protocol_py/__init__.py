"""protocol-py: the model-provider plugin protocol (model.v1) and its reference implementation.

The generated message classes live in ``protocol_py_gen`` (``protocol_py_gen.model.v1``,
``protocol_py_gen.content.v1``, ``protocol_py_gen.common.v1``); this package holds the
handwritten layer around them.
"""

from protocol_py.version import PACKAGE_VERSION, PROTOCOL_VERSION

__all__ = ["PACKAGE_VERSION", "PROTOCOL_VERSION"]
