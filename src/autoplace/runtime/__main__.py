"""``python -m autoplace.runtime CLUSTER.json``: a rank of the distributed runtime, started by torchrun on
every host of a cluster that spans hosts (``autoplace ranks`` prints and runs the command)."""

import sys

from autoplace.runtime.dist.serve import main

sys.exit(main())
