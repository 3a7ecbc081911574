"""The connection side of the driver: the pool (owned or the caller's), the compiled statements,
and the one place psycopg errors become ``XError``s.

Every statement runs on a pool connection in autocommit (one statement, one commit), unless the
caller hands in its own connection, in which case it runs there, inside the caller's transaction,
and commits or rolls back with it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Final, Literal, TypeAlias, TypeVar, cast

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ultimat3.core import XError
from ultimat3.jobs.postgres._dial import PROBE_TIMEOUT_S, check_dsn, probe
from ultimat3.jobs.postgres._sql import check_schema_name, compile_queries, generic_plans

Conn: TypeAlias = psycopg.AsyncConnection[Any]
Cursor: TypeAlias = psycopg.AsyncCursor[Any]
Pool: TypeAlias = AsyncConnectionPool[Any]
Row: TypeAlias = tuple[Any, ...]
Params: TypeAlias = Mapping[str, Any]
LeanParams: TypeAlias = Mapping[str, Any] | tuple[str | None, ...]
"""A ``LEAN`` statement's parameters: by name, or as text in its placeholders' order."""
T = TypeVar("T")

ACTIVE: Final = pq.TransactionStatus.ACTIVE
_FIX_UNAVAILABLE = (
    "check that Postgres is up and DATABASE_URL points at it; the call is safe to retry"
)


class wrap_errors:
    """Turn psycopg's failures into ``XError``s that keep the cause.

    A lost, refused or timed-out connection (or a closed pool) is ``X_DRIVER_UNAVAILABLE``;
    a value Postgres refuses to store (NUL bytes, an out-of-range time, a key too long to index)
    is ``X_INVARIANT`` naming the operation. (A class, not a generator: it wraps every
    statement, and entering it costs no generator.)"""

    __slots__ = ("schema", "what")

    def __init__(self, what: str, schema: str | None = None) -> None:
        self.what = what
        self.schema = schema

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> Literal[False]:
        if exc is None or isinstance(exc, XError):
            return False
        mapped = _mapped(exc, self.what, self.schema)
        if mapped is None:
            return False
        raise mapped from exc


def _mapped(exc: BaseException, what: str, schema: str | None) -> XError | None:
    """The ``XError`` a psycopg failure (or a text Postgres cannot store) becomes, if any."""
    if isinstance(exc, pg_errors.UndefinedTable | pg_errors.InvalidSchemaName):
        where = f"schema {schema!r}" if schema is not None else "the schema"
        return XError(
            "X_CONFIG_INVALID",
            f"postgres job driver: {what}: {where} has no job tables ({_first_line(exc)})",
            fix=f"run `await migrate(DATABASE_URL, schema={schema!r})` before using the driver",
            meta={"operation": what, "schema": schema},
        )
    if isinstance(exc, pg_errors.InFailedSqlTransaction):
        return XError(
            "X_INVARIANT",
            f"postgres job driver: {what}: the caller's transaction already failed; Postgres "
            "ignores every statement until it is rolled back",
            fix="roll the transaction back (its earlier statement failed), then enqueue again",
            meta={"operation": what},
        )
    if isinstance(exc, UnicodeEncodeError):
        return XError(
            "X_INVARIANT",
            f"postgres job driver: {what}: a value is not valid Unicode text ({exc.reason}: "
            f"{exc.object[exc.start : exc.end]!r}), which Postgres cannot store",
            fix="drop the lone surrogate from the name, key or JSON value",
            meta={"operation": what},
        )
    if isinstance(exc, psycopg.DataError | pg_errors.ProgramLimitExceeded):
        return XError(
            "X_INVARIANT",
            f"postgres job driver: {what}: Postgres refused a value: {_first_line(exc)}",
            fix="check the names, keys and JSON values passed to this call",
            meta={"operation": what, "sqlstate": getattr(exc, "sqlstate", None)},
        )
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return XError(
            "X_DRIVER_UNAVAILABLE",
            f"postgres job driver: {what} failed: {_first_line(exc)}",
            fix=_FIX_UNAVAILABLE,
            meta={"operation": what, "sqlstate": getattr(exc, "sqlstate", None)},
        )
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def is_psycopg_async_connection(connection: object) -> bool:
    return isinstance(connection, psycopg.AsyncConnection)


class DriverConnection(psycopg.AsyncConnection[Any]):
    """A connection of the driver's own pool: it keeps one cursor and reuses it statement after
    statement. ``conn.execute`` makes a new cursor per statement, which builds its adapters'
    transformer anew (about 25 us a statement here).

    The statements of ``LEAN`` (the single enqueue's) skip the cursor altogether:
    ``lean_fetchone`` sends them as statements prepared once per connection, straight through
    libpq, and waits on the socket itself — ~50 us less client CPU per statement than a cursor
    (whose wait also arms a timer on every statement). Their parameters are text, whole numbers,
    booleans or ``None``, and every column they answer is read as text.

    The socket stays watched from one lean statement to the next (one reader registered with the
    loop, not one per statement: two ``epoll_ctl`` calls fewer each). Whatever else waits on the
    socket — psycopg itself, through ``wait`` — or closes the connection takes the watch off
    first; so does data that arrives while no lean statement waits (a notice, the server's
    goodbye), which is left in the socket for the next reader instead of waking the loop again
    and again."""

    _statement_cursor: psycopg.AsyncCursor[Any] | None = None
    _generic_plans: bool = False  # the session's plan_cache_mode is force_generic_plan
    _lean_prepared: frozenset[str] = frozenset()
    _lean_loop: asyncio.AbstractEventLoop | None = None  # the loop watching the socket, if any
    _lean_fd: int = -1
    _lean_waiter: asyncio.Future[None] | None = None
    _lean_first: Any = None  # the statement's first result, while its answer is read

    async def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        """psycopg's own wait on the socket (every statement, commit or rollback it runs), the
        lean watch taken off first: the loop holds one reader per socket."""
        self._lean_unwatch()
        return await super().wait(gen, *args, **kwargs)

    async def close(self) -> None:
        self._lean_unwatch()  # before the socket closes: its number is reused at once
        await super().close()

    def _lean_readable(self) -> None:
        """The socket is readable: read what came and, once the statement's answer is whole
        (libpq idle again), hand its first result to the waiting statement. A partial answer
        (the server sends a statement's rows before its commit's ReadyForQuery) wakes nobody:
        one task step per statement, not one per packet."""
        waiter = self._lean_waiter
        if waiter is None:
            self._lean_unwatch()  # nobody reads: leave it in the socket and stop waking
            return
        if waiter.done():
            return
        try:
            done, first = _lean_collect(self.pgconn, self._lean_first)
        except BaseException as exc:  # a lost connection: the statement raises it
            waiter.set_exception(exc)
            return
        self._lean_first = first
        if done:
            waiter.set_result(None)

    def _lean_unwatch(self) -> None:
        loop = self._lean_loop
        if loop is not None:
            self._lean_loop = None
            if not loop.is_closed():
                loop.remove_reader(self._lean_fd)

    async def plans(self, *, generic: bool) -> None:
        """Set the session's ``plan_cache_mode`` for the next statement: ``force_generic_plan``
        for a ``GENERIC`` one, the session's own default (``RESET``) for anything else — one
        ``SET`` when it changes, none while a connection runs the hot statements only."""
        if self._generic_plans is not generic:
            await self.statement_cursor().execute(_GENERIC_ON if generic else _GENERIC_OFF)
            self._generic_plans = generic

    def statement_cursor(self) -> psycopg.AsyncCursor[Any]:
        cursor = self._statement_cursor
        if cursor is None or cursor.closed:
            cursor = self._statement_cursor = self.cursor()
        return cursor

    async def lean_fetchone(
        self, name: str, statement: LeanStatement, params: LeanParams
    ) -> tuple[str | None, ...] | None:
        """The first row of ``statement`` run with ``params``, each column as text (or
        ``None``), or ``None`` when it answered no row. Cancelled mid-statement, it asks the
        server to cancel the statement too, as a cursor would; the connection is then left
        mid-statement, and the pool closes it when it comes back."""
        encoding = self.info.encoding
        if isinstance(params, tuple):  # text already, in the placeholders' order (lean_order)
            values = [None if v is None else v.encode(encoding) for v in params]
        else:
            values = _text_params(map(params.__getitem__, statement.order), encoding)
        pgconn = self.pgconn
        try:
            for again in (False, True):
                if name not in self._lean_prepared:
                    pgconn.send_prepare(statement.name, statement.query)
                    with suppress(pg_errors.DuplicatePreparedStatement):  # prepared before
                        await self._lean_result(encoding)
                    self._lean_prepared = self._lean_prepared | {name}
                pgconn.send_query_prepared(statement.name, values)
                try:
                    result = await self._lean_result(encoding)
                    break
                except pg_errors.InvalidSqlStatementName:
                    # psycopg deallocates every prepared statement of its connection (at its
                    # next statement there) after a ROLLBACK, a DROP or an ALTER it ran: this
                    # one is gone, maybe not the ones prepared since; prepare it again, once
                    self._lean_prepared = self._lean_prepared - {name}
                    if again:
                        raise
        except (asyncio.CancelledError, KeyboardInterrupt):
            if pgconn.transaction_status == ACTIVE:
                with suppress(Exception):
                    await asyncio.shield(self.cancel_safe(timeout=5.0))
            raise
        if not result.ntuples:
            return None
        return tuple(
            None if value is None else value.decode(encoding)
            for value in map(result.get_value, repeat(0), range(result.nfields))
        )

    async def _lean_result(self, encoding: str) -> Any:
        """Send what is buffered, then read the statement's one result up to the end of its
        answer; a failed statement raises the error psycopg would."""
        pgconn = self.pgconn
        loop = asyncio.get_running_loop()
        fileno = pgconn.socket
        while pgconn.flush():  # a large parameter the socket took only part of
            await _writable(loop, fileno)
        # No read before the first wait: the answer needs the server's packets after this
        # send, and the watch is level-triggered (one recv syscall fewer a statement).
        if self._lean_loop is not loop or self._lean_fd != fileno:
            self._lean_unwatch()
            loop.add_reader(fileno, self._lean_readable)
            self._lean_loop, self._lean_fd = loop, fileno
        self._lean_first = None
        waiter = self._lean_waiter = loop.create_future()
        try:
            await waiter  # the reader collects the results (``_lean_readable``)
        finally:
            self._lean_waiter = None
            first, self._lean_first = self._lean_first, None
        if first is None:
            raise psycopg.InterfaceError("the server answered the statement with no result")
        if first.status == pq.ExecStatus.FATAL_ERROR:
            raise pg_errors.error_from_result(first, encoding=encoding)
        return first


def _lean_collect(pgconn: Any, first: Any) -> tuple[bool, Any]:
    """Read what the socket holds and take every whole result off libpq: ``(done, first)``,
    ``done`` once the answer is complete (libpq idle), ``first`` the statement's first
    result. Never blocks."""
    pgconn.consume_input()
    while not pgconn.is_busy():
        result = pgconn.get_result()
        if result is None:
            return True, first
        if first is None:
            first = result
    return False, first


@dataclass(frozen=True, slots=True)
class LeanStatement:
    """A statement of ``LEAN`` as libpq takes it: ``$n`` placeholders, and the parameter name
    each one stands for."""

    name: bytes
    query: bytes
    order: tuple[str, ...]


_NAMED_PARAM: Final = re.compile(r"%\((\w+)\)s|%%")


def lean_statement(name: str, text: str) -> LeanStatement:
    """``text`` (psycopg's ``%(name)s`` placeholders) with ``$n`` ones, one per distinct name
    in first-use order, as a statement prepared under ``x_<name>``."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        key = match.group(1)
        if key is None:
            return "%"
        if key not in order:
            order.append(key)
        return f"${order.index(key) + 1}"

    query = _NAMED_PARAM.sub(number, text)
    return LeanStatement(f"x_{name}".encode(), query.encode(), tuple(order))


def _text_params(values: Iterable[object], encoding: str) -> list[bytes | None]:
    """Parameters in Postgres's text form; each one's type is the statement's (every ``LEAN``
    parameter is cast or lands in a typed column)."""
    out: list[bytes | None] = []
    for value in values:
        kind = type(value)
        if kind is str:
            text = cast("str", value)
            if "\x00" in text:
                raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
            out.append(text.encode(encoding))
        elif value is None:
            out.append(None)
        elif kind is bool:
            out.append(b"t" if value else b"f")
        elif kind is int:
            out.append(str(value).encode())
        else:
            raise psycopg.ProgrammingError(f"a lean statement takes no {kind.__name__} parameter")
    return out


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _writable(loop: asyncio.AbstractEventLoop, fileno: int) -> None:
    """Until the socket can be written (reads wait on the connection's lean watch)."""
    future = loop.create_future()
    loop.add_writer(fileno, _wake, future)
    try:
        await future
    finally:
        loop.remove_writer(fileno)


HOT_REUSES: Final = 256
"""How many statements in a row a connection may serve from ``DriverPool``'s hot slot before it
goes back through the pool's own return (its lifetime and health checks)."""


class DriverPool(AsyncConnectionPool[Any]):
    """The driver's own pool, with a hot slot: a connection given back is kept out of the pool
    until the end of the event loop's current step, and a statement asking for one within that
    step (an app enqueueing in a loop: one statement after another with no wait between) takes
    it again without the pool's lock, logging and bookkeeping (~15-50 us a statement here,
    docs/performance.md "#16 enqueue"). At the step's end whatever is still hot goes back
    through ``putconn``, so no connection sits idle outside the pool across a wait; one that
    another task is waiting for goes back at once; and every ``HOT_REUSES`` statements the
    connection takes the pool's own return (its ``max_lifetime`` and health checks)."""

    _hot: list[Any]
    _hot_uses: int = 0
    _hot_loop: asyncio.AbstractEventLoop | None = None
    _cooling: bool = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._hot = []
        self._returns: set[asyncio.Task[None]] = set()

    async def getconn(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109 (psycopg_pool's signature)
        hot = self._hot
        if hot and not self._closed and self._hot_loop is asyncio.get_running_loop():
            conn = hot.pop()
            if not conn.closed and conn.pgconn.transaction_status == pq.TransactionStatus.IDLE:
                return conn
            await super().putconn(conn)  # broken meanwhile: the pool's return sorts it out
        return await super().getconn(timeout)

    async def putconn(self, conn: Any) -> None:
        self._hot_uses += 1
        loop = asyncio.get_running_loop()
        if (
            self._closed
            or self._waiting
            or self._hot_uses % HOT_REUSES == 0
            or conn.closed
            or conn.pgconn.transaction_status != pq.TransactionStatus.IDLE
            or (self._hot and self._hot_loop is not loop)
        ):
            await super().putconn(conn)
            return
        self._hot_loop = loop
        self._hot.append(conn)
        if not self._cooling:
            self._cooling = True
            loop.call_soon(self._cool)

    def _cool(self) -> None:
        """The step ended: give back every connection still hot, through the pool's return."""
        self._cooling = False
        hot, self._hot = self._hot, []
        for conn in hot:
            task = asyncio.ensure_future(super().putconn(conn))
            self._returns.add(task)
            task.add_done_callback(self._returns.discard)

    async def close(self, timeout: float = 5.0) -> None:  # noqa: ASYNC109 (psycopg_pool's signature)
        hot, self._hot = self._hot, []
        for conn in hot:
            with suppress(Exception):
                await super().putconn(conn)
        if self._returns:
            await asyncio.gather(*self._returns, return_exceptions=True)
        await super().close(timeout)


_GENERIC_ON: Final = b"SET plan_cache_mode = force_generic_plan"
_GENERIC_OFF: Final = b"RESET plan_cache_mode"
GENERIC: Final = generic_plans()
"""The statements the driver runs on its own pool under ``plan_cache_mode =
force_generic_plan`` (marked ``-- plan: generic`` in ``sql/queries``): the worker's claim,
settles and step records, whose custom plan cost more to make than to run. A connection the
driver hands out for anything else (a transaction, a step's own SQL) is back at the session's
default first."""

LEAN: Final = frozenset({"enqueue", "enqueue_blind", "enqueue_holder"})
"""The statements a driver-owned connection runs through ``DriverConnection.lean_fetchone``:
the single enqueue's, where the client's cost per statement is most of the caller's wait."""


class Database:
    """A pool of connections to one database, plus the statements compiled for one schema."""

    def __init__(
        self,
        source: str | Pool,
        *,
        schema: str,
        min_size: int,
        max_size: int,
        timeout_s: float,
    ) -> None:
        self.schema = check_schema_name(schema)
        self.q = compile_queries(self.schema)
        self._lean_statements: dict[str, LeanStatement] = {}
        self._dsn: str | None = None
        self._pool: Pool | None = None
        given: object = source
        self._owned = isinstance(given, str)
        if isinstance(given, str):
            if not given:
                raise XError(
                    "X_CONFIG_INVALID",
                    "postgres_job_driver: the DSN is empty",
                    fix="pass DATABASE_URL, e.g. postgresql://user@host:5432/db, or a pool",
                )
            self._dsn = given
        elif isinstance(given, AsyncConnectionPool):
            self._pool = given
        else:
            raise XError(
                "X_CONFIG_INVALID",
                f"postgres_job_driver: {type(given).__name__} is neither a DSN nor a "
                "psycopg_pool.AsyncConnectionPool",
                fix="pass DATABASE_URL (a str) or an AsyncConnectionPool you opened",
            )
        if isinstance(min_size, bool) or not isinstance(min_size, int) or min_size < 0:
            raise XError("X_CONFIG_INVALID", f"postgres_job_driver: min_size {min_size!r}")
        if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:
            raise XError("X_CONFIG_INVALID", f"postgres_job_driver: max_size {max_size!r}")
        self._min_size = min(min_size, max_size)
        self._max_size = max_size
        self._timeout_s = timeout_s
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def owns_pool(self) -> bool:
        return self._owned

    @property
    def max_size(self) -> int:
        """How many connections the pool may hold (the caller's pool: its own maximum)."""
        if self._owned or self._pool is None:
            return self._max_size
        return self._pool.max_size

    def conninfo(self) -> str:
        """The DSN the driver connects with (its own, or the caller's pool's)."""
        if self._dsn is not None:
            return self._dsn
        assert self._pool is not None
        info = self._pool.conninfo
        if isinstance(info, str) and info:
            return info
        raise XError(
            "X_CONFIG_INVALID",
            "postgres job driver: the caller's pool has no plain conninfo to dial a session with",
            fix="pass dsn=DATABASE_URL where a DSN is asked for",
        )

    async def open(self) -> Pool:
        """The pool, opened on first use when the driver owns it."""
        if self._pool is not None:
            return self._pool
        if self._closed:
            raise XError(
                "X_DRIVER_UNAVAILABLE",
                "postgres job driver: the driver was closed",
                fix="build a new driver with postgres_job_driver(...)",
            )
        async with self._lock:
            opened = cast("Pool | None", self._pool)  # another task may have opened it
            if opened is not None:
                return opened
            assert self._dsn is not None
            check_dsn(self._dsn)
            await probe(self._dsn, timeout_s=min(PROBE_TIMEOUT_S, self._timeout_s))
            kwargs: dict[str, Any] = {"autocommit": True}
            given_params = conninfo_to_dict(self._dsn)
            if "connect_timeout" not in given_params:
                kwargs["connect_timeout"] = max(1, int(self._timeout_s))
            if "application_name" not in given_params:
                kwargs["application_name"] = "ultimat3.jobs"
            created: Pool = DriverPool(
                self._dsn,
                connection_class=DriverConnection,
                kwargs=kwargs,
                min_size=self._min_size,
                max_size=self._max_size,
                open=False,
                timeout=self._timeout_s,
                name="ultimat3.jobs",
            )
            try:
                with wrap_errors("opening the connection pool"):
                    await created.open(wait=self._min_size > 0, timeout=self._timeout_s)
            except BaseException:
                await created.close()
                raise
            self._pool = created
            return created

    async def close(self) -> None:
        self._closed = True
        if self._owned and self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    @asynccontextmanager
    async def connection(self, given: Conn | None = None) -> AsyncIterator[Conn]:
        """``given`` as it is (the caller's transaction), else a pool connection."""
        if given is not None:
            yield given
            return
        pool = await self.open()
        if not self._owned:
            async with pool.connection() as conn:  # commits, whatever the caller's pool is set to
                yield conn
            return
        # The driver's own pool is autocommit: there is nothing to commit when the connection
        # goes back (what pool.connection() would do, ~15 us a statement); putconn rolls back a
        # connection left inside a transaction and closes one left mid-statement or broken.
        conn = await pool.getconn()
        try:
            if cast("DriverConnection", conn)._generic_plans:
                await cast("DriverConnection", conn).plans(generic=False)
            yield conn
        finally:
            await pool.putconn(conn)

    @asynccontextmanager
    async def transaction(self, what: str) -> AsyncIterator[Conn]:
        """A pool connection inside one transaction (for the multi-statement operator calls)."""
        with wrap_errors(what, self.schema):
            try:
                async with self.connection() as conn, conn.transaction():
                    yield conn
            except PoolTimeout as exc:
                raise self.pool_exhausted(what) from exc

    def pool_exhausted(self, what: str) -> XError:
        """The refusal of a statement that waited the pool's whole timeout for a connection: it
        names the pool, its size and how to grow it (a run holds no connection between its
        statements, so this is the app, or far too small a pool, holding them all)."""
        pool = self._pool
        name = pool.name if pool is not None else "ultimat3.jobs"
        size = self.max_size
        timeout = pool.timeout if pool is not None else self._timeout_s
        stats = pool.get_stats() if pool is not None else {}
        grow = (
            f"postgres_job_driver(DATABASE_URL, max_size={size * 2})"
            if self._owned
            else f"AsyncConnectionPool(..., max_size={size * 2}) (the pool you passed in)"
        )
        return XError(
            "X_DRIVER_UNAVAILABLE",
            f"postgres job driver: {what}: no connection of the pool {name!r} came free within "
            f"{timeout:g} s (max_size={size}, every connection in use, "
            f"{stats.get('requests_waiting', 0)} more waiting)",
            fix=f"grow the pool ({grow}) or hold fewer of its connections in the app; "
            "the statement is safe to retry",
            meta={
                "operation": what,
                "pool": name,
                "max_size": size,
                "timeout_s": timeout,
            },
        )

    def lean_order(self, name: str) -> tuple[str, ...]:
        """The parameter names of ``LEAN`` statement ``name`` in its placeholders' order: a
        ``fetchone`` of it on the driver's own pool may pass its parameters as a tuple of text
        (or ``None``) in that order instead of a mapping."""
        return self._lean(name).order

    def _lean(self, name: str) -> LeanStatement:
        statement = self._lean_statements.get(name)
        if statement is None:
            statement = self._lean_statements[name] = lean_statement(name, self.q[name])
        return statement

    async def fetchall(
        self, name: str, params: Params, *, conn: Conn | None = None, what: str | None = None
    ) -> list[Row]:
        return await self._run(name, params, conn, what, _all)

    async def fetchone(
        self, name: str, params: LeanParams, *, conn: Conn | None = None, what: str | None = None
    ) -> Row | None:
        return await self._run(name, params, conn, what, _one)

    async def rowcount(
        self, name: str, params: Params, *, conn: Conn | None = None, what: str | None = None
    ) -> int:
        return await self._run(name, params, conn, what, _count)

    async def _run(
        self,
        name: str,
        params: LeanParams,
        conn: Conn | None,
        what: str | None,
        read: Callable[[Cursor], Awaitable[T]],
    ) -> T:
        """One statement. On the caller's connection: once, inside its transaction. On a pool
        connection (autocommit: a failed statement changed nothing): again after a deadlock or
        a serialization failure, and — for a statement safe to repeat — after a lost
        connection, once the pool has dropped its dead connections (a server restart)."""
        with wrap_errors(what or name, self.schema):
            if conn is not None:
                return await read(await conn.execute(self.q[name], params))
            for attempt in range(ATTEMPTS):
                last = attempt == ATTEMPTS - 1
                try:
                    if not self._owned:
                        async with self.connection() as c:
                            return await read(await c.cursor().execute(self.q[name], params))
                    # the driver's own pool, inline (as connection() takes it): this path is
                    # every statement of a worker and of an enqueue
                    pool = self._pool if self._pool is not None else await self.open()
                    mine = cast("DriverConnection", await pool.getconn())
                    try:
                        generic = name in GENERIC
                        if mine._generic_plans is not generic:
                            await mine.plans(generic=generic)
                        if name in LEAN and read is _one:
                            row = await mine.lean_fetchone(name, self._lean(name), params)
                            return cast("T", row)
                        cursor = mine.statement_cursor()
                        return await read(await cursor.execute(self.q[name], params))
                    finally:
                        await pool.putconn(mine)
                except PoolTimeout as exc:  # no connection came free: not a lost one
                    raise self.pool_exhausted(what or name) from exc
                except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure):
                    if last:
                        raise
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    if not _connection_lost(exc):
                        raise
                    if self._pool is not None:
                        await self._pool.check()  # drop every dead idle connection now
                    if last or name not in REPEATABLE:
                        raise
            raise AssertionError("unreachable: the last attempt raises")


ATTEMPTS: Final = 3
REPEATABLE: Final = frozenset(
    {
        # reads
        "enqueue_holder",
        "now_ms",
        "stats",
        "sample_queues",
        "steps_load",
        "show",
        "list_after",
        "list_before",
        "job_state",
        "paused_queues",
        "paused_tasks",
        "task_fires",
        "workers",
        "counters",
        "counter_totals",
        "lease_holders",
        "backfill_list",
        # writes whose repeat changes nothing more (an enqueue dedupes on its own id)
        "enqueue",
        "enqueue_blind",
        "enqueue_many",
        "enqueue_many_fresh",
        "enqueue_many_blind",
        "heartbeat",
        "heartbeat_many",
        "progress",
        "pause_queue",
        "pause_task",
        "register_worker",
        "worker_heartbeat",
        "lease_renew",
        "wake_waiters",
        "wake_published",
    }
)
"""Statements the driver sends again after a lost connection. A claim or a settle is not among
them: it may have committed before the connection died, so the caller hears
X_DRIVER_UNAVAILABLE and the lease (or the fence) decides what happens next."""


def _connection_lost(exc: BaseException) -> bool:
    state = getattr(exc, "sqlstate", None)
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


async def _all(cur: Cursor) -> list[Row]:
    return await cur.fetchall()


async def _one(cur: Cursor) -> Row | None:
    return await cur.fetchone()


async def _count(cur: Cursor) -> int:
    return cur.rowcount
