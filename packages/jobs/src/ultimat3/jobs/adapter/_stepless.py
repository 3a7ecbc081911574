"""``Stepless``: the job ids a driver claimed that had no step yet, so their first
``steps.load`` answers ``{}`` without a round trip (the Postgres and Redis drivers share it)."""

from __future__ import annotations


class Stepless:
    """Job ids this driver claimed that had no step at their claim (bounded, oldest dropped).

    While a claim holds a row, only its holder can record a step, and it records through this
    driver (which forgets the id first); so ``steps.load`` of such a job is ``{}`` without a
    round trip: the first thing every run does costs nothing for a job that never recorded a
    step. A claim that lapsed to another worker makes the holder a zombie whose writes are fenced
    anyway."""

    __slots__ = ("_bound", "_ids")

    def __init__(self, bound: int = 50_000) -> None:
        self._ids: dict[str, None] = {}
        self._bound = bound

    def add(self, job_id: str) -> None:
        self._ids[job_id] = None
        if len(self._ids) > self._bound:
            del self._ids[next(iter(self._ids))]

    def discard(self, job_id: str) -> None:
        self._ids.pop(job_id, None)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._ids
