"""``python -m protocol_py.cli``: the ``protocol-py`` command."""

import sys

from protocol_py.cli import main

sys.exit(main())
