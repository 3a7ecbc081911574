"""``publish_event``: an event for ``step.wait_for_event``, joining the ambient transaction.

Published inside one, the event commits and rolls back with it. The memory bus lives with the
memory driver (``ultimat3.jobs.memory``), the Postgres one with the Postgres driver.
"""

from __future__ import annotations

from typing import Any

from ultimat3.core import XError, adapter, current_connection, current_signal, to_json_form
from ultimat3.jobs.adapter import EVENT_BUS


async def publish_event(event: str, payload: Any) -> str:
    """Publish ``event`` with ``payload`` (stored in its JSON form) on the installed bus, inside
    the ambient transaction when there is one; answers the event's id. Wakes the runs waiting
    on it."""
    signal = current_signal()
    if signal is not None and signal.reason is not None:
        raise signal.reason  # a cancelled body writes nothing
    if not isinstance(event, str) or not event:
        raise XError(
            "X_INVARIANT",
            f"publish_event: event {event!r} is not a non-empty str",
            fix="publish_event('order.approved', {'order_id': ...})",
        )
    bus = adapter(EVENT_BUS)
    return await bus.publish(event, to_json_form(payload), connection=current_connection())
