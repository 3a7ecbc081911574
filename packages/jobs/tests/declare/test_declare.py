"""job(): the declaration, its refusals, and the handle's lifted fields and key functions."""

from __future__ import annotations

import json
import math
from typing import Any
from uuid import UUID, uuid4

import pytest
from pydantic import BaseModel

from ultimat3.core import XError
from ultimat3.jobs import Concurrency, Job, Retry, job


class OnboardOrg(BaseModel):
    org_id: UUID


class Sync(BaseModel):
    org_id: UUID
    account_id: str


def _key(i: OnboardOrg) -> str:
    return f"onboard:{i.org_id}"


async def onboard_org(input: OnboardOrg, step: Any, ctx: Any) -> None:
    return None


def _declare(**over: Any) -> Job[Any, Any]:
    fields: dict[str, Any] = {"input": OnboardOrg, "idempotency_key": _key, "run": onboard_org}
    fields.update(over)
    declared: Job[Any, Any] = job(**fields)
    return declared


def _causes(exc: pytest.ExceptionInfo[XError]) -> list[str]:
    causes = exc.value.meta["causes"]
    assert isinstance(causes, list)
    return causes


def test_decorator_and_run_forms_declare_the_same_job() -> None:
    @job(input=OnboardOrg, idempotency_key=_key)
    async def decorated(input: OnboardOrg, step: Any, ctx: Any) -> None:
        return None

    called = job(input=OnboardOrg, idempotency_key=_key, run=onboard_org)
    assert isinstance(decorated, Job)
    assert isinstance(called, Job)
    assert decorated.name == "decorated"
    assert called.name == "onboard_org"
    assert decorated.describe()["retry"] == called.describe()["retry"]


def test_lifted_fields_are_resolved() -> None:
    j = _declare(timeout="2m", step_timeout="30s", event_poll="5s")
    assert j.kind == "job"
    assert j.queue == "default"
    assert j.input is OnboardOrg
    assert j.timeout_ms == 120_000
    assert j.step_timeout_ms == 30_000
    assert j.event_poll_ms == 5_000
    assert j.concurrency is None
    assert j.when_busy is None
    # the framework defaults merged underneath, durations in ms
    assert j.retry == Retry(
        attempts=3,
        backoff="exponential",
        jitter="equal",
        delay=1000,
        max_delay=3_600_000,
        dead_letter=True,
    )


def test_a_declared_retry_keeps_its_fields_and_gets_the_rest_defaulted() -> None:
    j = _declare(retry=Retry(attempts=5, backoff="linear", delay="2s"))
    assert j.retry.attempts == 5
    assert j.retry.backoff == "linear"
    assert j.retry.delay == 2000
    assert j.retry.jitter == "equal"
    assert j.retry.max_delay == 3_600_000


def test_undeclared_ceilings_are_none() -> None:
    j = _declare()
    assert (j.timeout_ms, j.step_timeout_ms, j.event_poll_ms) == (None, None, None)


def test_concurrency_is_the_cap_whichever_way_declared_and_when_busy_exactly_when_keyed() -> None:
    plain = _declare(concurrency=4)
    keyed = _declare(
        input=Sync,
        idempotency_key=lambda i: f"sync:{i.account_id}",
        concurrency=Concurrency(key=lambda i: i.account_id, limit=2, when_busy="fail"),
    )
    keyed_wait = _declare(
        input=Sync,
        idempotency_key=lambda i: f"sync:{i.account_id}",
        concurrency=Concurrency(key=lambda i: i.account_id),
    )
    assert (plain.concurrency, plain.when_busy) == (4, None)
    assert (keyed.concurrency, keyed.when_busy) == (2, "fail")
    assert (keyed_wait.concurrency, keyed_wait.when_busy) == (1, "wait")


def test_a_missing_idempotency_key_is_refused_at_declaration() -> None:
    with pytest.raises(XError) as exc:
        job(input=OnboardOrg, run=onboard_org)  # type: ignore[call-overload]
    assert exc.value.code == "X_IDEMPOTENCY_REQUIRED"
    assert "onboard_org" in exc.value.message
    assert exc.value.fix


def test_the_decorator_form_refuses_a_missing_key_before_it_is_applied() -> None:
    with pytest.raises(XError) as exc:
        job(input=OnboardOrg)  # type: ignore[call-overload]
    assert exc.value.code == "X_IDEMPOTENCY_REQUIRED"


def test_a_missing_key_also_names_the_other_causes() -> None:
    with pytest.raises(XError) as exc:
        job(input=OnboardOrg, run=onboard_org, timeout=0)  # type: ignore[call-overload]
    assert exc.value.code == "X_IDEMPOTENCY_REQUIRED"
    assert any("timeout" in c for c in _causes(exc))


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("timeout", 0, "timeout"),
        ("timeout", -5, "timeout"),
        ("timeout", "0s", "timeout"),
        ("step_timeout", 0, "step_timeout"),
        ("event_poll", -1, "event_poll"),
        ("on_settled_timeout", 0, "on_settled_timeout"),
        ("timeout", "soon", "timeout"),
    ],
)
def test_non_positive_or_junk_ceilings_are_refused(field: str, value: Any, needle: str) -> None:
    with pytest.raises(XError) as exc:
        _declare(**{field: value})
    assert exc.value.code == "X_JOB_DECLARATION_INVALID"
    assert needle in exc.value.message
    assert exc.value.fix


@pytest.mark.parametrize(
    ("retry", "needle"),
    [
        (Retry(attempts=0), "retry.attempts"),
        (Retry(attempts=-1), "retry.attempts"),
        (Retry(attempts=1.5), "retry.attempts"),  # type: ignore[arg-type]
        (Retry(attempts=True), "retry.attempts"),
        (Retry(backoff="cubic"), "retry.backoff"),  # type: ignore[arg-type]
        (Retry(jitter="some"), "retry.jitter"),  # type: ignore[arg-type]
        (Retry(delay="-"), "retry.delay"),
        (Retry(delay="10s", max_delay="1s"), "retry.max_delay"),
        (Retry(dead_letter="no"), "retry.dead_letter"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_retry_is_refused_naming_the_field(retry: Retry, needle: str) -> None:
    with pytest.raises(XError) as exc:
        _declare(retry=retry)
    assert exc.value.code == "X_JOB_DECLARATION_INVALID"
    assert needle in exc.value.message


def test_retry_must_be_a_retry() -> None:
    with pytest.raises(XError) as exc:
        _declare(retry={"attempts": 3})
    assert exc.value.code == "X_JOB_DECLARATION_INVALID"
    assert "Retry" in exc.value.message


@pytest.mark.parametrize("cap", [0, -1, 1.5, math.nan, math.inf, "4"])
def test_a_bad_concurrency_cap_is_refused(cap: Any) -> None:
    with pytest.raises(XError) as exc:
        _declare(concurrency=cap)
    assert exc.value.code == "X_JOB_DECLARATION_INVALID"
    assert "concurrency" in exc.value.message


@pytest.mark.parametrize("limit", [0, -2, 0.5, math.nan, math.inf])
def test_a_bad_keyed_limit_is_refused(limit: Any) -> None:
    with pytest.raises(XError) as exc:
        _declare(concurrency=Concurrency(key=lambda i: "k", limit=limit))
    assert exc.value.code == "X_JOB_DECLARATION_INVALID"
    assert "concurrency.limit" in exc.value.message


def test_a_non_callable_concurrency_key_and_an_unknown_when_busy_are_each_named() -> None:
    with pytest.raises(XError) as exc:
        _declare(concurrency=Concurrency(key="acct", when_busy="later"))  # type: ignore[arg-type]
    causes = _causes(exc)
    assert any("concurrency.key" in c for c in causes)
    assert any("when_busy" in c for c in causes)


def test_every_cause_is_named_in_one_refusal() -> None:
    with pytest.raises(XError) as exc:
        _declare(
            timeout=0,
            step_timeout=-1,
            queue="",
            retry=Retry(attempts=0),
            concurrency=0,
            idempotency_key="not a function",
            tenant="everyone",
        )
    causes = " | ".join(_causes(exc))
    for needle in (
        "timeout",
        "step_timeout",
        "queue",
        "retry.attempts",
        "concurrency",
        "idempotency_key",
        "tenant",
    ):
        assert needle in causes
    assert exc.value.code == "X_JOB_DECLARATION_INVALID"


def test_a_lambda_body_needs_a_name() -> None:
    with pytest.raises(XError) as exc:
        _declare(run=lambda i, s, c: None)
    assert exc.value.code == "X_JOB_DECLARATION_INVALID"
    assert "name" in exc.value.message
    named = _declare(run=lambda i, s, c: None, name="onboard")
    assert named.name == "onboard"


def test_a_missing_input_is_named() -> None:
    with pytest.raises(XError) as exc:
        job(idempotency_key=_key, run=onboard_org)  # type: ignore[call-overload]
    assert "input" in exc.value.message


def test_an_input_pydantic_cannot_validate_is_refused() -> None:
    class Opaque:
        pass

    with pytest.raises(XError) as exc:
        _declare(input=Opaque)
    assert exc.value.code == "X_JOB_DECLARATION_INVALID"
    assert "input" in exc.value.message


def test_parse_takes_the_model_or_a_dict_and_refuses_junk() -> None:
    j = _declare()
    org = uuid4()
    assert j.parse(OnboardOrg(org_id=org)) == OnboardOrg(org_id=org)
    assert j.parse({"org_id": str(org)}) == OnboardOrg(org_id=org)
    with pytest.raises(XError) as exc:
        j.parse({"org_id": "not-a-uuid"})
    assert exc.value.code == "X_BODY_INVALID"
    assert "org_id" in exc.value.message
    assert "onboard_org" in exc.value.message


async def count(input: int, step: Any, ctx: Any) -> None:
    return None


def test_any_type_pydantic_validates_is_an_input() -> None:
    j = job(input=int, idempotency_key=lambda i: f"n:{i}", name="count", run=count)
    assert j.parse("42") == 42
    assert j.describe()["input"] == {"type": "integer"}


def test_describe_is_the_manifest_row_without_a_key() -> None:
    j = _declare(
        input=Sync,
        idempotency_key=lambda i: f"sync:{i.account_id}",
        concurrency=Concurrency(key=lambda i: i.account_id, limit=1, when_busy="fail"),
        retry=Retry(attempts=5),
        queue="integrations",
    )
    row = j.describe()
    assert set(row) == {"name", "input", "queue", "retry", "steps", "idempotent", "concurrency"}
    assert row["input"]["properties"]["account_id"]["type"] == "string"
    assert row["queue"] == "integrations"
    assert row["retry"] == {"attempts": 5, "backoff": "exponential"}
    assert row["steps"] == []
    assert row["idempotent"] is True
    assert row["concurrency"] == {"limit": 1, "keyed": True, "when_busy": "fail"}
    assert "sync:" not in json.dumps(row)
    assert _declare(concurrency=3).describe()["concurrency"] == {
        "limit": 3,
        "keyed": False,
        "when_busy": "wait",
    }
    assert _declare().describe()["concurrency"] is None


def test_idempotency_key_for_answers_the_declared_key() -> None:
    org = uuid4()
    assert _declare().idempotency_key_for({"org_id": str(org)}) == f"onboard:{org}"


@pytest.mark.parametrize("bad", ["", None, 7])
def test_an_empty_or_non_string_key_throws_at_the_call(bad: Any) -> None:
    j = _declare(idempotency_key=lambda i: bad)
    with pytest.raises(XError) as exc:
        j.idempotency_key_for({"org_id": str(uuid4())})
    assert exc.value.code == "X_INVARIANT"
    assert exc.value.fix


def test_concurrency_key_for_answers_the_key_or_none() -> None:
    keyed = _declare(
        input=Sync,
        idempotency_key=lambda i: i.account_id,
        concurrency=Concurrency(key=lambda i: f"acct:{i.account_id}"),
    )
    assert keyed.concurrency_key_for({"org_id": str(uuid4()), "account_id": "a1"}) == "acct:a1"
    assert _declare(concurrency=2).concurrency_key_for({"org_id": str(uuid4())}) is None


@pytest.mark.parametrize("bad", ["", 5, "x" * 201])
def test_a_bad_concurrency_key_is_a_declaration_refusal(bad: Any) -> None:
    j = _declare(concurrency=Concurrency(key=lambda i: bad))
    with pytest.raises(XError) as exc:
        j.concurrency_key_for({"org_id": str(uuid4())})
    assert exc.value.code == "X_JOB_DECLARATION_INVALID"
    assert "concurrency.key" in exc.value.message


def test_a_200_character_concurrency_key_is_fine() -> None:
    j = _declare(concurrency=Concurrency(key=lambda i: "k" * 200))
    assert j.concurrency_key_for({"org_id": str(uuid4())}) == "k" * 200


def test_tenant_of_reads_the_declared_tenant() -> None:
    org = uuid4()
    j = _declare(tenant=lambda i: i.org_id)  # a UUID reads as its string
    assert j.tenant_of(OnboardOrg(org_id=org)) == str(org)
    assert _declare().tenant_of(OnboardOrg(org_id=org)) is None
