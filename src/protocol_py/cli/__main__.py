"""``python -m protocol_py.cli``: the ``protocol-py`` command."""

import sys

from protocol_py.cli.app import main

sys.exit(main())
