"""``python -m ultimat3.jobs.cli ...`` is ``x ...``."""

import sys

from ._main import main

sys.exit(main())
