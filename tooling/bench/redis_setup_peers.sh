#!/usr/bin/env bash
# The Redis benchmark's own environment: .x/redis-bench-venv (gitignored), the machine's Python,
# holding the peers from PyPI (arq, SAQ, RQ, Dramatiq) beside our workspace packages in editable
# mode. The peers are NEVER dependencies of the project: they live here only.
#
#   bash tooling/bench/redis_setup_peers.sh
#   .x/redis-bench-venv/bin/python tooling/bench/redis_bench.py
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
venv="$root/.x/redis-bench-venv"
mkdir -p "$root/.x"
if [[ ! -x "$venv/bin/python" ]]; then
    uv venv --python "${BENCH_PYTHON:-3.11}" --python-preference only-system "$venv"
fi
uv pip install --python "$venv/bin/python" \
    -e packages/core -e packages/jobs -e packages/jobs-redis \
    "arq>=0.26" "saq>=0.24" "rq>=2.0" "dramatiq[redis]>=1.17"
"$venv/bin/python" - <<'PY'
from importlib.metadata import version

for dist in ("ultimat3-jobs-redis", "redis", "arq", "saq", "rq", "dramatiq"):
    print(f"{dist:>20} {version(dist)}")
PY
