"""``python -m ultimat3.jobs.cli ...`` is ``x ...``."""

import sys

from ultimat3.jobs.cli._main import main

sys.exit(main())
