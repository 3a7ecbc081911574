"""Fixtures of the dashboard tests: jobs put in every state through the driver itself (so one
seeding serves memory, Postgres and Redis), a driver wrapper that counts reads, and an httpx
client over the ASGI app."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest

from ultimat3.core import new_id
from ultimat3.jobs.adapter import EnqueueRequest, JobDriver, memory_job_driver

XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
"""Attacker-controlled text: a name, a queue, an input and an error carry it."""


@dataclass
class Seeded:
    """Ids by what they are."""

    ids: dict[str, str] = field(default_factory=dict)
    queues: tuple[str, ...] = ()


def request(
    *,
    name: str = "dash.sync",
    queue: str = "work",
    payload: Any = None,
    delay_ms: int | None = None,
    max_attempts: int = 3,
    tenant: str | None = None,
) -> EnqueueRequest:
    job_id = new_id()
    return EnqueueRequest(
        id=job_id,
        run_id=new_id(),
        name=name,
        queue=queue,
        payload={"n": job_id} if payload is None else payload,
        idempotency_key=f"{name}:{job_id}",
        max_attempts=max_attempts,
        delay_ms=delay_ms,
        tenant_id=tenant,
    )


async def put(driver: JobDriver, **kw: Any) -> str:
    return (await driver.enqueue(request(**kw))).id


async def claim(driver: JobDriver, queue: str, worker: str = "w-seed") -> tuple[str, str]:
    got = await driver.claim(
        queues=[queue], limit=1, worker_id=worker, visibility_timeout_ms=60_000
    )
    assert len(got) == 1, f"nothing to claim on {queue}"
    return got[0].id, got[0].claim


async def seed_states(driver: JobDriver, prefix: str = "") -> Seeded:
    """One job in each state, a dead letter of two groups, a paused queue and XSS payloads;
    every queue name starts with ``prefix`` (so a shared store keeps tests apart)."""
    q = {k: f"{prefix}{k}" for k in ("work", "slow", "held", "evil")}
    intro = driver.introspect  # type: ignore[attr-defined]
    s = Seeded(queues=tuple(q.values()))
    # settled ones first, each claimed alone from its own queue
    s.ids["done"] = await put(driver, name="dash.report", queue=q["slow"])
    jid, c = await claim(driver, q["slow"])
    await driver.steps.record(
        jid, "load", state="completed", worker_id="w-seed", claim=c, output={"rows": 3}
    )
    await driver.ack(jid, worker_id="w-seed", claim=c, result={"rows": 3}, duration_ms=12)
    for key, code in (
        ("dead", "X_CHARGE_DECLINED"),
        ("dead2", "X_CHARGE_DECLINED"),
        ("dead3", None),
    ):
        s.ids[key] = await put(
            driver,
            name="dash.charge",
            queue=q["slow"],
            payload={"card_token": "tok_live_123", "amount": 5},
        )
        jid, c = await claim(driver, q["slow"])
        await driver.steps.record(
            jid, "load", state="completed", worker_id="w-seed", claim=c, output={"cart": 1}
        )
        err = {
            "code": code,
            "message": "card declined by the vendor",
            "fix": "ask for another card",
            "meta": {"step": "charge"},
            "status": None,
        }
        await driver.steps.record(
            jid, "charge", state="failed", worker_id="w-seed", claim=c, error=err
        )
        await driver.nack(jid, worker_id="w-seed", claim=c, outcome="dead", error=err)
    s.ids["failed"] = await put(driver, name="dash.sync", queue=q["slow"])
    jid, c = await claim(driver, q["slow"])
    await driver.nack(
        jid,
        worker_id="w-seed",
        claim=c,
        outcome="failed",
        error={"code": "X_JOB_KEY_BUSY", "message": "busy"},
    )
    s.ids["suspended"] = await put(driver, name="dash.onboard", queue=q["slow"])
    jid, c = await claim(driver, q["slow"])
    await driver.steps.record(
        jid, "welcome", state="completed", worker_id="w-seed", claim=c, output="sent"
    )
    await driver.nack(jid, worker_id="w-seed", claim=c, outcome="suspend", delay_ms=3_600_000)
    s.ids["running"] = await put(driver, name="dash.sync", queue=q["slow"])
    await claim(driver, q["slow"])
    s.ids["cancelled"] = await put(driver, name="dash.sync", queue=q["slow"])
    await intro.cancel(s.ids["cancelled"], "not needed")
    # live ones
    s.ids["ready"] = await put(driver, name="dash.sync", queue=q["work"])
    s.ids["delayed"] = await put(driver, name="dash.sync", queue=q["work"], delay_ms=3_600_000)
    s.ids["held"] = await put(driver, name="dash.sync", queue=q["held"])
    await intro.pause_queue(q["held"])
    # attacker-controlled text everywhere it can go
    s.ids["evil"] = await put(
        driver, name=f"dash.{XSS}", queue=q["evil"] + XSS, payload={"note": XSS}
    )
    jid, c = await claim(driver, q["evil"] + XSS)
    evil_err = {
        "code": None,
        "message": f"boom {XSS}",
        "fix": XSS,
        "meta": {"x": XSS},
        "status": None,
    }
    await driver.steps.record(
        jid, f"step{XSS}", state="failed", worker_id="w-seed", claim=c, error=evil_err
    )
    await driver.nack(jid, worker_id="w-seed", claim=c, outcome="dead", error=evil_err)
    return s


class Counting:
    """Forwards every attribute of ``inner``, counting each call of an async member."""

    def __init__(self, inner: Any, calls: Counter[str], prefix: str) -> None:
        self._inner, self._calls, self._prefix = inner, calls, prefix

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value) or name.startswith("_"):
            return value

        def counted(*a: Any, **kw: Any) -> Any:
            self._calls[self._prefix + name] += 1
            return value(*a, **kw)

        return counted


class CountingDriver(Counting):
    def __init__(self, inner: Any, calls: Counter[str]) -> None:
        super().__init__(inner, calls, "driver.")
        self.introspect = Counting(inner.introspect, calls, "introspect.")
        self.backfills = Counting(inner.backfills, calls, "backfills.")


@pytest.fixture
def memory() -> JobDriver:
    return memory_job_driver()


@pytest.fixture
async def client_for() -> AsyncIterator[Callable[..., httpx.AsyncClient]]:
    """``client_for(app)``: an httpx client over the ASGI app, at the mount ``/admin/jobs``."""
    made: list[httpx.AsyncClient] = []

    def make(app: Any) -> httpx.AsyncClient:
        async def mounted(scope: Any, receive: Any, send: Any) -> None:
            path = scope.get("path", "")
            if scope["type"] == "http" and path.startswith("/admin/jobs"):
                scope = {**scope, "root_path": "/admin/jobs"}
            await app(scope, receive, send)

        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=mounted),
            base_url="http://dash.test",
            follow_redirects=True,
        )
        made.append(client)
        return client

    yield make
    for c in made:
        await c.aclose()


Seed = Callable[..., Awaitable[Seeded]]


@pytest.fixture(scope="session")
def seed() -> Seed:
    """``await seed(driver, prefix='')``: one job in each state (see ``seed_states``)."""
    return seed_states


@pytest.fixture(name="put", scope="session")
def put_fixture() -> Callable[..., Awaitable[str]]:
    """``await put(driver, name=..., queue=..., payload=..., delay_ms=...)``: one ready job."""
    return put


@pytest.fixture(scope="session")
def xss() -> str:
    return XSS


@pytest.fixture
def counting() -> Callable[[Any, Counter[str]], CountingDriver]:
    return CountingDriver


class Page(HTMLParser):
    """A rendered page, parsed: its start tags, and the text of elements by id / data-*."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: Counter[str] = Counter()
        self.marked: dict[tuple[str, str], str] = {}
        self._open: list[tuple[str, list[tuple[str, str]], list[str]]] = []
        self.text_parts: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        if tag in ("input", "meta", "link", "br", "hr", "img"):
            return
        marks = [(k, v or "") for k, v in attrs if k == "id" or k.startswith("data-")]
        self._open.append((tag, marks, []))

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            name, marks, parts = self._open.pop()
            text = "".join(parts)
            for key in marks:
                self.marked[key] = text
            if self._open:
                self._open[-1][2].append(text)
            if name == tag:
                return

    def handle_data(self, data: str) -> None:
        self.text_parts.append(data)
        if self._open:
            self._open[-1][2].append(data)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def by_data(self, attr: str) -> dict[str, str]:
        """``{value of data-<attr>: text}`` for every element carrying it."""
        return {v: t for (k, v), t in self.marked.items() if k == f"data-{attr}"}

    def by_id(self, ident: str) -> str:
        return self.marked[("id", ident)]


@pytest.fixture
def parse() -> Callable[[str], Page]:
    return Page
