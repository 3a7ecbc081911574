"""The chaos soak on Redis, bounded (#23): three worker processes on a private redis-server with
``appendfsync always``, SIGKILLed and SIGSTOP/SIGCONTed at random, the server itself SIGKILLed
and restarted once from its append-only file; then the invariants against the driver's rows
(``ultimat3_testkit.chaos_redis`` lists them). Longer on demand:
``python -m ultimat3_testkit.chaos_redis --jobs 2000 --minutes 2``."""

from __future__ import annotations

import pytest

from ultimat3_testkit.chaos_redis import soak

JOBS = 600
SECONDS = 40.0


@pytest.mark.timeout(300)
async def test_the_bounded_redis_chaos_soak_keeps_every_invariant() -> None:
    report = await soak(jobs=JOBS, seconds=SECONDS, workers=3, seed=23)
    print(report)  # the figures, in the -rA / -s output
    assert report.kills >= 3, report  # the chaos really happened
    assert report.restarts == 1, report
    assert report.run_jobs > 0
    assert report.violations == {
        "I1 lost": 0,
        "I2 phantom": 0,
        "I7 attempts over max": 0,
        "I5 completed step re-ran": 0,
        "I6 settle not by its one owner": 0,
        "I8 cap exceeded": 0,
    }, report
    assert report.settles >= JOBS, report  # I6 saw the settles: every job's ack at least
    assert report.claims >= report.settles, report
    assert report.monitor_dials == 2, report  # before the server's death and after it
    assert report.claims_not_on_disk == 0, report  # the file holds every claim it relies on
    assert 1 <= report.max_cap_seen <= 2, report
