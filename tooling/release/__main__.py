"""Build every published distribution, check it as an index would, and install it from the built
files alone.

    uv run python tooling/release [--out DIR]

1. ``uv build --package <dist> --sdist --wheel`` for each of the six library distributions
   (core, jobs, jobs-redis, http, storage, entity; the demo app and the test kit are not
   published) into ``--out`` (default: a temporary folder, removed after).
2. ``twine check --strict`` on every file (the README renders, the metadata is complete), and
   our own: each wheel's ``Requires-Dist`` names no path, URL or workspace source, every sdist
   carries its ``pyproject.toml`` and ``README.md``.
3. Two fresh venvs, made outside the checkout: one installs the six WHEELS by file, the other the
   six SDISTS by file (built from source, proving the sdist is whole); third-party dependencies
   come from the index, ours from the files alone (``--no-sources``). In each, every package
   imports from the venv's site-packages (never the checkout), ``x --help`` runs, and a job runs
   to done on the memory driver through the harness.
4. The README's form: plain ``pip install ./packages/core ./packages/jobs`` in a third fresh venv
   (pip, no uv, no workspace), then the imports and ``x --help``.

Exit 0 when every check passes; each failure is printed as ``release: FAIL ...``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DISTS = ("core", "jobs", "jobs-redis", "http", "storage", "entity")
MODULES = {
    "core": "ultimat3.core",
    "jobs": "ultimat3.jobs",
    "jobs-redis": "ultimat3.jobs_redis",
    "http": "ultimat3.http",
    "storage": "ultimat3.storage",
    "entity": "ultimat3.entity",
}

SMOKE = """
import asyncio, sys
from typing import Any
from pydantic import BaseModel
import ultimat3.core, ultimat3.jobs, ultimat3.jobs_redis, ultimat3.http, ultimat3.storage
import ultimat3.entity
from ultimat3.jobs import job
from ultimat3.jobs.testing import job_harness

for module in (ultimat3.core, ultimat3.jobs, ultimat3.jobs_redis, ultimat3.http,
               ultimat3.storage, ultimat3.entity):
    assert module.__file__ is not None and sys.prefix in module.__file__, module.__file__

class N(BaseModel):
    n: int

async def double(input: N, step: Any, ctx: Any) -> int:
    return await step.run("double", lambda signal: input.n * 2)

doubled = job(input=N, idempotency_key=lambda i: f"d:{i.n}", name="release.double", run=double)

async def main() -> None:
    async with job_harness(jobs=[doubled]) as h:
        trace = await h(doubled, {"n": 21})
        assert trace.state == "done" and trace.result == 42, trace

asyncio.run(main())
print("release smoke: six packages import from", sys.prefix, "and a job runs to done")
"""


def run(*cmd: str | Path, cwd: Path | None = None) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout, proc.stderr, sep="\n", file=sys.stderr)
        raise SystemExit(f"release: FAIL: {' '.join(map(str, cmd))} exited {proc.returncode}")
    return proc.stdout


def build(out: Path) -> None:
    for dist in DISTS:
        run("uv", "build", "--package", f"ultimat3-{dist}", "--sdist", "--wheel", "--quiet",
            "--out-dir", out, cwd=ROOT)  # fmt: skip


def files(out: Path, dist: str) -> tuple[Path, Path]:
    stem = "ultimat3_" + dist.replace("-", "_")
    [wheel] = sorted(out.glob(f"{stem}-*.whl"))
    [sdist] = sorted(out.glob(f"{stem}-*.tar.gz"))
    return wheel, sdist


def check_metadata(out: Path) -> list[str]:
    failures: list[str] = []
    everything = sorted(out.glob("*.whl")) + sorted(out.glob("*.tar.gz"))
    run(sys.executable, "-m", "twine", "check", "--strict", *everything)
    for dist in DISTS:
        wheel, sdist = files(out, dist)
        with zipfile.ZipFile(wheel) as zf:
            name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            meta = Parser().parsestr(zf.read(name).decode())
        for req in meta.get_all("Requires-Dist") or []:
            if "@" in req or "file:" in req or "workspace" in req:
                failures.append(f"{wheel.name}: Requires-Dist {req!r} points at a source")
        if not meta.get("Summary") or not meta.get("License-Expression", meta.get("License")):
            failures.append(f"{wheel.name}: no Summary or License in its metadata")
        with tarfile.open(sdist) as tf:
            names = {Path(n).name for n in tf.getnames()}
        for needed in ("pyproject.toml", "README.md", "PKG-INFO"):
            if needed not in names:
                failures.append(f"{sdist.name}: lacks {needed}")
    return failures


def install_and_smoke(tmp: Path, label: str, paths: list[Path]) -> None:
    env = tmp / f"venv-{label}"
    run("uv", "venv", "--quiet", "--python", sys.executable, env, cwd=tmp)
    py = env / "bin" / "python"
    # ours from these files alone (no workspace sources, no editable link); the rest from the index
    run("uv", "pip", "install", "--quiet", "--no-sources", "--python", py, *paths, cwd=tmp)
    listed = run("uv", "pip", "list", "--python", py, "--format", "freeze", cwd=tmp)
    for line in listed.splitlines():
        if line.startswith("ultimat3") and ("@" in line or "-e " in line):
            raise SystemExit(f"release: FAIL: {label}: {line} is not installed from a built file")
    run(py, "-c", SMOKE, cwd=tmp)
    run(env / "bin" / "x", "--help", cwd=tmp)
    print(f"release: {label}: installed from the built files alone; imports, x --help, a job runs")


PIP_SMOKE = """
import sys
import ultimat3.core, ultimat3.jobs
for module in (ultimat3.core, ultimat3.jobs):
    assert module.__file__ is not None and sys.prefix in module.__file__, module.__file__
"""


def pip_from_checkout(tmp: Path) -> None:
    """The README's form: plain ``pip install ./packages/core ./packages/jobs`` in a fresh venv
    (no uv, no workspace); installed, not linked into the checkout."""
    env = tmp / "venv-pip"
    run(sys.executable, "-m", "venv", env, cwd=tmp)
    py = env / "bin" / "python"
    run(py, "-m", "pip", "install", "--quiet", ROOT / "packages" / "core",
        ROOT / "packages" / "jobs", cwd=tmp)  # fmt: skip
    run(py, "-c", PIP_SMOKE, cwd=tmp)
    run(env / "bin" / "x", "--help", cwd=tmp)
    print("release: pip install ./packages/core ./packages/jobs works in a fresh venv")


def main() -> int:
    parser = argparse.ArgumentParser(prog="tooling/release", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="keep the built files here")
    a = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="x-release-") as t:
        tmp = Path(t)
        out = a.out.resolve() if a.out else tmp / "dist"
        out.mkdir(parents=True, exist_ok=True)
        for old in list(out.glob("ultimat3_*")):
            old.unlink()
        build(out)
        print(f"release: built {len(list(out.glob('ultimat3_*')))} files into {out}")
        failures = check_metadata(out)
        if not failures:
            print("release: twine check --strict passes; no Requires-Dist points at a source")
        wheels = [files(out, d)[0] for d in DISTS]
        sdists = [files(out, d)[1] for d in DISTS]
        install_and_smoke(tmp, "wheels", wheels)
        install_and_smoke(tmp, "sdists", sdists)
        pip_from_checkout(tmp)
    for failure in failures:
        print("release: FAIL:", failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
