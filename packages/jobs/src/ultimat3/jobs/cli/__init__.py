"""The ``x`` command line of ultimat3-jobs: ``x jobs ...``, ``x db ...``, ``x worker``.

``main(argv, driver=...)`` runs one command and answers its exit code; it is the console
script (``x = "ultimat3.jobs.cli:main"``) and what a test or an embedding app calls with a driver.
"""

from ._main import main, main_async

__all__ = ["main", "main_async"]
