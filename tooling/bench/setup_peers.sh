#!/usr/bin/env bash
# The benchmark's own environment: .x/bench-venv (gitignored), Python 3.12, holding the peers
# from PyPI (procrastinate, pgqueuer, oban), our workspace packages in editable mode, and
# psycopg. The peers are NEVER dependencies of the project: they live here only.
#
#   bash tooling/bench/setup_peers.sh
#   .x/bench-venv/bin/python tooling/bench/pg_bench.py
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
venv="$root/.x/bench-venv"

mkdir -p "$root/.x"
# A Python 3.12 already on the machine (Oban for Python needs 3.12); never a download.
py312="${BENCH_PYTHON:-}"
if [[ -z "$py312" ]]; then
    for candidate in "$(pyenv prefix 3.12 2>/dev/null)/bin/python3.12" \
        "$(command -v python3.12 || true)" /root/.pyenv/versions/3.12*/bin/python3.12; do
        if [[ -x "$candidate" ]] && "$candidate" -c 'import sys' 2>/dev/null; then
            py312="$candidate"
            break
        fi
    done
fi
if [[ -z "$py312" ]]; then
    echo "setup_peers.sh: no working python3.12 found; set BENCH_PYTHON=/path/to/python3.12" >&2
    exit 1
fi
if [[ ! -x "$venv/bin/python" ]]; then
    uv venv --python "$py312" --python-preference only-system "$venv"
fi
export VIRTUAL_ENV="$venv"
uv pip install --python "$venv/bin/python" \
    -e packages/core -e packages/jobs \
    "psycopg[binary,pool]>=3.2" \
    "procrastinate>=3.0" \
    "pgqueuer[asyncpg]>=0.20" \
    "oban>=0.5"
"$venv/bin/python" - <<'PY'
from importlib.metadata import version

for dist in ("ultimat3-jobs", "procrastinate", "pgqueuer", "oban", "psycopg"):
    print(f"{dist:>14} {version(dist)}")
PY
