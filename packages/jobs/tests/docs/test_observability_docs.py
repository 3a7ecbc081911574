"""docs/observability.md runs as written — every python block, in order, in one FRESH interpreter
(the example installs the process-wide OpenTelemetry SDK, which can be done once per process) —
and it names every metric and every registered log event at its level."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from ultimat3.core import EVENT_LEVELS

PAGE = Path(__file__).resolve().parents[4] / "docs" / "observability.md"


def test_every_python_example_in_observability_md_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 3
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks) + "\nprint('observability.md: ok')"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("observability.md: ok")


def test_the_page_names_every_metric_and_every_event_at_its_level() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for metric in (
        "jobs_total",
        "job_leases_lost_total",
        "job_crashes_total",
        "job_worker_in_flight",
        "job_worker_capacity",
        "queue_depth",
        "queue_demand",
    ):
        assert f"| `{metric}` |" in text, metric
    for event, level in EVENT_LEVELS.items():
        assert f"| `{event}` | {level} |" in text, event
    assert "## Choices where the spec is silent" in text
