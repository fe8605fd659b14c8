"""Version constants (docs/decisions.md#d1).

``PROTOCOL_VERSION`` is the wire protocol's ``MAJOR.MINOR``; it equals the version written in the
header comment of every ``.proto`` file (a test keeps them equal). ``PACKAGE_VERSION`` is this
distribution's semver: package ``X.Y.Z`` carries protocol ``X.Y``. ``tools/release X.Y.Z`` sets
both (and the proto headers and pyproject.toml).
"""

from typing import Final

PROTOCOL_VERSION: Final = "1.2"
"""The protocol version carried by this package, ``MAJOR.MINOR``."""

PROTOCOL_MAJOR: Final = 1
"""The protocol major version, as printed in the ``--handshake`` line."""

PACKAGE_VERSION: Final = "1.2.0"
"""The package version (semver)."""
