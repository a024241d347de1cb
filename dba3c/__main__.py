"""``python -m dba3c`` is the ``dba3c`` command."""

import sys

from dba3c.cli import main

sys.exit(main())
