"""ultimat3.jobs.embedded: a PostgreSQL with no install, for a laptop, a demo or a test
(``pip install "ultimat3-jobs[embedded]"``).

```python
from ultimat3.jobs.embedded import database_url_or_embedded, embedded_postgres
from ultimat3.jobs.postgres import migrate, postgres_job_driver

with embedded_postgres(".x/pg") as pg:          # starts it (about a second), stops it at the end
    await migrate(pg.url)
    driver = postgres_job_driver(pg.url)

url, handle = database_url_or_embedded(os.environ)   # DATABASE_URL when set, else embedded
```

Importing this module imports nothing optional: the ``embedded-postgres`` package is loaded when
a server is asked for, and its absence is ``X_CONFIG_INVALID`` whose fix installs the extra.
"""

from ultimat3.jobs.embedded._server import (
    DEFAULT_DATA_DIR,
    EmbeddedPostgres,
    database_url_or_embedded,
    embedded_postgres,
)

__all__ = [
    "DEFAULT_DATA_DIR",
    "EmbeddedPostgres",
    "database_url_or_embedded",
    "embedded_postgres",
]
