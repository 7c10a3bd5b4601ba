"""``python -m autoplace.cli``."""

import sys

from autoplace.cli import main

sys.exit(main())
