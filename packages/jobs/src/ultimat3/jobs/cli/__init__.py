"""The ``x`` command line of ultimat3-jobs: ``x jobs ...``, ``x db ...``, ``x worker``.

``main(argv, driver=...)`` runs one command and answers its exit code; it is the console
script (``x = "ultimat3.jobs.cli:main"``) and what a test or an embedding app calls with a driver.

Commands of other distributions plug in through the entry point group ``ultimat3.cli``
(``PLUGIN_GROUP``): each entry names a ``register(root, common)`` that adds its subcommands to
``root`` (a ``Commands``) with the common flags ``common``; a handler takes an ``Invocation``
and answers an ``Answer``. ``x demo`` (apps/demo) is registered that way.
"""

from ultimat3.jobs.cli._driver import redact
from ultimat3.jobs.cli._invocation import Commands, Handler, Invocation, add_command
from ultimat3.jobs.cli._main import PLUGIN_GROUP, main, main_async
from ultimat3.jobs.cli._output import Answer

__all__ = [
    "PLUGIN_GROUP",
    "Answer",
    "Commands",
    "Handler",
    "Invocation",
    "add_command",
    "main",
    "main_async",
    "redact",
]
