"""The chaos soak in CI, bounded (#23): three worker processes on a private PostgreSQL cluster,
SIGKILLed and SIGSTOP/SIGCONTed at random, the server restarted once with ``-m immediate``, a mix
of plain steps, ``step.transaction``, sleeps and a keyed concurrency cap; then the invariants in
SQL (``ultimat3_testkit.chaos`` lists them). The long soak is the same code:
``python -m ultimat3_testkit.chaos --jobs 100000 --minutes 20``."""

from __future__ import annotations

import pytest

from ultimat3_testkit.chaos import soak

JOBS = 600
SECONDS = 40.0


@pytest.mark.timeout(300)
async def test_the_bounded_chaos_soak_keeps_every_invariant() -> None:
    report = await soak(jobs=JOBS, seconds=SECONDS, workers=3, seed=23)
    print(report)  # the figures, in the -rA / -s output
    assert report.kills >= 3, report  # the chaos really happened
    assert report.restarts == 1, report
    assert report.tx_jobs > 0 and report.run_jobs > 0
    assert report.violations == {
        "I1 lost": 0,
        "I2 phantom": 0,
        "I3 tx effect not exactly once": 0,
        "I5 completed step re-ran": 0,
        "I6 settle not by its one owner": 0,
        "I7 attempts over max": 0,
        "I8 cap exceeded": 0,
    }, report
    assert 1 <= report.max_cap_seen <= 2, report
    assert report.settles >= JOBS and report.claims >= report.settles, report
