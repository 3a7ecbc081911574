"""The registry of every ``X_`` code: default message, fix, retry class and status."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Literal

RetryClass = Literal["retryable", "terminal", "retry-after"]
RETRY_CLASSES: frozenset[str] = frozenset({"retryable", "terminal", "retry-after"})


@dataclass(frozen=True, slots=True)
class CodeInfo:
    """What the registry knows about one code."""

    code: str
    message: str
    fix: str
    retry: RetryClass = "retryable"
    status: int | None = None


_T: RetryClass = "terminal"
_A: RetryClass = "retry-after"

_ENTRIES: tuple[CodeInfo, ...] = (
    # --- cancellation and lifecycle -------------------------------------------------------
    CodeInfo(
        "X_ABORTED",
        "the operation was aborted",
        "none needed when you aborted it; otherwise pass the signal on and stop at the next "
        "throw_if_aborted(ctx) — wrap work that must land in run_to_completion(fn)",
    ),
    CodeInfo(
        "X_DRAINING",
        "the worker holding this job is draining (SIGTERM)",
        "none — the job goes straight back to the queue and another worker claims it. Pass "
        "ctx.signal to outbound calls and throw_if_aborted(ctx) between steps",
        status=503,
    ),
    CodeInfo(
        "X_JOB_TIMEOUT",
        "the run exceeded its timeout",
        "raise job(timeout=...) or split the work into more steps",
        status=504,
    ),
    CodeInfo(
        "X_JOB_SLOT_LOST",
        "the run lost its concurrency slot",
        "none — the run is retried; keep bodies honouring ctx.signal so a lost slot stops them",
    ),
    CodeInfo(
        "X_JOB_LEASE_LOST",
        "the run's lease lapsed: another worker may now run it",
        "keep the event loop free (await I/O, split CPU work into steps) so the heartbeat lands, "
        "or raise visibility_timeout_ms",
    ),
    CodeInfo(
        "X_JOB_CRASHED",
        "the worker process died while running this job, every time it ran alone",
        "the job kills its process (a segfault, os._exit, an out-of-memory kill, a C extension "
        "crash): x jobs show <id> names the last worker that died; fix the job, then x jobs "
        "retry <id> — or raise job(max_crashes=...)",
        _T,
        status=500,
    ),
    # --- declaration and enqueue ------------------------------------------------------------
    CodeInfo(
        "X_IDEMPOTENCY_REQUIRED",
        "a job declaration omits idempotency_key",
        "add idempotency_key=lambda input: ... derived from input only",
        _T,
    ),
    CodeInfo(
        "X_IDEMPOTENCY_CONFLICT",
        "the idempotency key was already used with a different payload, or is still in flight",
        "use a fresh key for a different payload; otherwise retry after the first settles",
        status=409,
    ),
    CodeInfo(
        "X_JOB_DECLARATION_INVALID",
        "the job() declaration is invalid",
        "add or correct the fields the message names",
        _T,
    ),
    CodeInfo(
        "X_JOB_TENANT_MISMATCH",
        "the payload's tenant is not the tenant of the enqueue or the run",
        "enqueue with the payload's own tenant, or wrap an ambient cross-tenant enqueue in "
        "cross_tenant('<why>', fn) as an actor holding tenancy:cross",
        _T,
        status=403,
    ),
    CodeInfo(
        "X_JOB_KEY_BUSY",
        "another run holds this concurrency key",
        "x jobs retry <id> re-queues it once the other run settles; or use when_busy='wait'",
        _T,
        status=409,
    ),
    CodeInfo(
        "X_JOB_CONCURRENCY_UNENFORCEABLE",
        "a job declares concurrency but the driver has no lease store",
        "use a driver with a LeaseStore (postgres_job_driver(), memory_job_driver()) or drop "
        "concurrency from the named jobs",
    ),
    CodeInfo(
        "X_JOB_ENQUEUE_BATCH_TOO_LARGE",
        "enqueue_many was given more inputs than MAX_ENQUEUE_BATCH",
        "split the inputs into batches of at most MAX_ENQUEUE_BATCH (10,000)",
        status=413,
    ),
    CodeInfo(
        "X_JOB_DUPLICATE",
        "a live job already holds this idempotency key",
        "let the live job settle, or cancel it, then retry",
        status=409,
    ),
    CodeInfo(
        "X_N_PLUS_ONE_WRITE",
        "a loop of single writes where one bulk write would do",
        "use enqueue_many(inputs) (or upsert_all) instead of a loop of enqueue",
    ),
    # --- steps --------------------------------------------------------------------------------
    CodeInfo(
        "X_STEP_DUPLICATE",
        "two step.run calls share a name in one run",
        "rename one step; step names are the persistence key",
        _T,
    ),
    CodeInfo(
        "X_STEP_OUTPUT_UNSERIALIZABLE",
        "a step's output has no JSON form",
        "return JSON-native values (dict, list, str, int, float, bool, None), a pydantic model "
        "or a dataclass; convert bytes, cycles and NaN yourself",
        _T,
    ),
    CodeInfo(
        "X_STEP_OUTCOME_UNKNOWN",
        "a once=True step started but never recorded an outcome",
        "x jobs resolve-step <id> <step> --ran --output '<json>' or --not-ran, then "
        "x jobs retry <id>",
        _T,
    ),
    CodeInfo(
        "X_JOB_STEP_FAILED",
        "a step failed",
        "x jobs show <id> --json for the step's error, then x jobs retry <id>",
    ),
    CodeInfo(
        "X_JOB_EVENT_INVALID",
        "an event payload failed the wait_for_event schema",
        "publish a payload the schema accepts, or widen the schema; then x jobs retry <id>",
        _T,
        status=422,
    ),
    CodeInfo(
        "X_JOB_COMPENSATION_FAILED",
        "a compensator failed while unwinding the run",
        "fix the compensator (or resolve the once step), then x jobs retry <id>",
    ),
    CodeInfo(
        "X_JOB_MAX_ATTEMPTS",
        "the job exhausted its retries and was dead-lettered",
        "x jobs show <id> --json, then x jobs retry <id> — only a dead, cancelled, failed or "
        "done job can be requeued",
    ),
    CodeInfo(
        "X_JOB_ON_SETTLED_FAILED",
        "the job's on_settled hook kept failing",
        "fix the hook; the job's own outcome is unchanged",
    ),
    CodeInfo(
        "X_JOB_CRASH_DIVERGED",
        "a crash at a step boundary produced a different effect than a clean run",
        "make the diverging step idempotent (upsert, dedupe key) so a replay changes nothing",
        _T,
    ),
    # --- introspection ---------------------------------------------------------------------
    CodeInfo(
        "X_JOB_RESULT_TIMEOUT",
        "the run did not settle within the result's timeout",
        "await job.result(id, timeout='2m') with a longer timeout, or check x jobs show <id>",
        status=504,
    ),
    CodeInfo(
        "X_JOB_NOT_FOUND",
        "no job has this id",
        "check the id with x jobs list --json",
        status=404,
    ),
    CodeInfo(
        "X_JOB_NOT_REMOVABLE",
        "a running job cannot be removed",
        "cancel it first (x jobs cancel <id>), then remove it",
        status=409,
    ),
    CodeInfo(
        "X_JOB_NOT_REQUEUEABLE",
        "only a finished job (done, failed, dead, cancelled) can be requeued",
        "wait for the job to finish, or cancel it first",
        status=409,
    ),
    CodeInfo(
        "X_JOB_NOT_CANCELLABLE",
        "the job is already finished, or the driver cannot cancel",
        "nothing to stop: x jobs show <id> --json shows how it ended",
        status=409,
    ),
    CodeInfo(
        "X_JOB_PAGE_INVALID",
        "the page size is over MAX_JOB_PAGE or the cursor came from no page",
        "ask for at most 200 rows and pass job_cursor(row) of a row you were given",
        status=422,
    ),
    CodeInfo(
        "X_NOT_IMPLEMENTED",
        "the driver does not implement this operation",
        "install a driver that does: install_job_driver(memory_job_driver()) in a test, "
        "postgres_job_driver(dsn) in an app",
        status=501,
    ),
    # --- drivers, locks, rate limits ------------------------------------------------------
    CodeInfo(
        "X_DRIVER_UNAVAILABLE",
        "the job driver's backend is unavailable",
        "check the database (or Redis) is up and reachable; the call is safe to retry",
        status=503,
    ),
    CodeInfo(
        "X_DB_LOCK_TIMEOUT",
        "a database lock was not granted within its lock_timeout",
        "none — retried; find the long transaction holding the lock if it keeps happening",
    ),
    CodeInfo(
        "X_LOCK_NOT_ACQUIRED",
        "another holder has the lock",
        "retry later, or pass a longer wait=",
        status=409,
    ),
    CodeInfo(
        "X_LOCK_LOST",
        "the lock's renewal did not land within its ttl",
        "raise ttl, keep the event loop free, and stop when grant.signal aborts",
    ),
    CodeInfo(
        "X_LOCK_STORE_MISSING",
        "with_lock has no lock store",
        "install postgres_job_driver() as the job driver, or pass store=",
    ),
    CodeInfo(
        "X_RATE_LIMITED",
        "the rate limit is spent",
        "wait meta['retry_after_seconds'] and try again",
        _A,
        429,
    ),
    CodeInfo(
        "X_RATE_LIMIT_NOT_SHARED",
        "a fleet-wide rate limit runs over a per-process store",
        "install a shared rate-limit store (Redis or Postgres) on every role",
    ),
    # --- consumer, imports ----------------------------------------------------------------------
    CodeInfo(
        "X_CONSUMER_INVALID",
        "the consumer() declaration is invalid",
        "give cursor.load and cursor.save, no timeout, a whole batch >= 1, and a rearm in whole "
        "minutes dividing an hour",
    ),
    CodeInfo(
        "X_CONSUMER_SELF_ENQUEUE",
        "a consumer's handle or open enqueued the consumer itself",
        "do not call the consumer's own enqueue from inside it; its supervisor re-arms it",
        _T,
    ),
    CodeInfo(
        "X_IMPORT_HEADER_MISMATCH",
        "the csv header does not name exactly the declared columns",
        "send a header naming every declared column (any order) and no other",
        _T,
    ),
    CodeInfo(
        "X_IMPORT_RECORD_TOO_LARGE",
        "a csv record is larger than max_record_bytes (usually an unclosed quote)",
        "close the quote at the byte offset named, or raise max_record_bytes",
        _T,
        status=413,
    ),
    CodeInfo(
        "X_IMPORT_TOO_MANY_ERRORS",
        "the import refused more rows than max_row_errors",
        "read the error report under the run's error prefix, fix the file, import again",
        _T,
    ),
    CodeInfo(
        "X_IMPORT_ENCODING_INVALID",
        "the file to import is not UTF-8",
        "save the file as UTF-8 (with or without a BOM); the message names the first bad byte's "
        "offset",
        _T,
    ),
    # --- object storage -----------------------------------------------------------------------
    CodeInfo(
        "X_STORAGE_KEY_INVALID",
        "the object key is not a relative '/'-separated path inside the store",
        "use a key such as 'imports/2026/orders.csv': no empty, '.' or '..' segment, no leading "
        "'/', no backslash, no control character, nothing that resolves outside the store",
        _T,
    ),
    CodeInfo(
        "X_STORAGE_NOT_FOUND",
        "no object is stored under the key",
        "check the key (store.list(prefix) shows what is stored), or put the object first",
    ),
    # --- personal data ------------------------------------------------------------------------
    CodeInfo(
        "X_SUBJECT_TABLE_UNDECLARED",
        "a table holding the subject's rows is not declared in the subject",
        "add the table to define_subject(...) with its treatment",
    ),
    CodeInfo(
        "X_SUBJECT_TREATMENT_INVALID",
        "a table's erase treatment is invalid",
        "state 'delete', {'anonymize': {col: value}} or {'retain': '<why>'} with known columns",
    ),
    CodeInfo(
        "X_SUBJECT_CYCLE",
        "the subject's tables form a loop with no nullable key to clear",
        "make one foreign key in the loop nullable",
    ),
    CodeInfo(
        "X_SUBJECT_ERASE_INCOMPLETE",
        "rows of the subject remain after the erase",
        "declare the table and column named, then x jobs retry <id>",
    ),
    CodeInfo(
        "X_PERSONAL_DATA_UNERASED",
        "a reached table's anonymize names fewer than every personal-data column",
        "anonymize every marked column, delete the row, or retain it with a reason",
    ),
    CodeInfo(
        "X_PERSONAL_DATA_UNREACHED",
        "an entity with personal data is reached by no subject",
        "add the entity to a subject's walk",
    ),
    # --- factories ----------------------------------------------------------------------------
    CodeInfo(
        "X_JOB_ROLLUP_INVALID",
        "the rollup() declaration is invalid",
        "give a positive lookback, a bucket unit series() has, an IANA zone and a key a "
        "unique constraint covers",
    ),
    CodeInfo(
        "X_JOB_REFRESH_VIEW_INVALID",
        "refresh_view() was given a table, a plain view, or concurrently with no unique index",
        "name a materialized view; add a unique index for concurrently=True",
    ),
    # --- ledger ---------------------------------------------------------------------------------
    CodeInfo(
        "X_LEDGER_UNBALANCED",
        "a posting's entries do not sum to zero per currency",
        "balance each currency's entries on their own",
        _T,
        422,
    ),
    CodeInfo(
        "X_LEDGER_ENTRY_INVALID",
        "a ledger entry is invalid",
        "use integer minor units, an ISO 4217 currency, a non-blank account, and two entries "
        "or more",
        _T,
        422,
    ),
    CodeInfo(
        "X_LEDGER_POSTING_CONFLICT",
        "the posting key is already stored with other lines",
        "use a fresh posting key for different lines",
        _T,
        409,
    ),
    # --- webhooks -------------------------------------------------------------------------------
    CodeInfo(
        "X_WEBHOOK_ENDPOINT_UNKNOWN",
        "no webhook endpoint has this id",
        "register the endpoint first, or check the id",
        _T,
    ),
    CodeInfo(
        "X_WEBHOOK_ENDPOINT_INVALID",
        "the webhook endpoint is invalid",
        "give an https URL on a public address and a non-empty secret",
        _T,
    ),
    CodeInfo(
        "X_WEBHOOK_ENDPOINT_DISABLED",
        "the webhook endpoint is disabled",
        "re-enable the endpoint (always the app's decision), then x jobs retry <id>",
        _T,
    ),
    CodeInfo(
        "X_WEBHOOK_EVENT_UNKNOWN",
        "no webhook event has this id",
        "store the event before enqueuing its delivery, or check the id",
        _T,
    ),
    CodeInfo(
        "X_WEBHOOK_EVENT_INVALID",
        "the webhook event could not be read",
        "answer {'event_id', 'payload'} from verify with a JSON-able payload, and catch your own "
        "parse errors (raise an XError naming no content)",
        _T,
        400,
    ),
    CodeInfo(
        "X_WEBHOOK_DELIVERY_FAILED",
        "the webhook delivery failed",
        "none — retried with backoff; check the receiver if it keeps failing",
    ),
    CodeInfo(
        "X_WEBHOOK_DELIVERY_THROTTLED",
        "the receiver throttled the delivery",
        "none — the delivery waits meta['retry_after_seconds'] and tries again",
        _A,
    ),
    CodeInfo(
        "X_WEBHOOK_DELIVERY_REJECTED",
        "the receiver rejected the delivery",
        "fix what the receiver refuses, then x jobs retry <id>",
        _T,
    ),
    CodeInfo(
        "X_WEBHOOK_SIGNATURE_INVALID",
        "the webhook signature is missing, malformed or does not match",
        "sign with sign_webhook(secret=..., event_id=..., topic=..., body=...) and the shared "
        "secret; send the body byte for byte",
        _T,
        401,
    ),
    CodeInfo(
        "X_WEBHOOK_SIGNATURE_STALE",
        "the webhook signature's timestamp is outside the tolerance",
        "sign at send time and keep the sender's clock in sync (NTP)",
        status=401,
    ),
    CodeInfo(
        "X_WEBHOOK_EVENT_ID_INVALID",
        "the webhook event id is not 1-256 printable ASCII characters",
        "send an event id of 1-256 printable ASCII characters, without ':'",
        status=422,
    ),
    CodeInfo(
        "X_WEBHOOK_RECEIVER_UNAVAILABLE",
        "the webhook receiver could not queue the event",
        "none — the sender redelivers after Retry-After",
        status=503,
    ),
    CodeInfo(
        "X_WEBHOOK_RECEIVER_INVALID",
        "the webhook_receiver() declaration is invalid",
        "give an absolute path outside /api and /_x, verify and handle functions, and a "
        "positive max_bytes",
    ),
    CodeInfo(
        "X_BODY_INVALID",
        "the request body is invalid or too large",
        "send a body within max_bytes in the expected format",
        status=422,
    ),
    # --- general ----------------------------------------------------------------------------------
    CodeInfo(
        "X_NOT_FOUND",
        "nothing is served at this path",
        "check the path against the receivers webhook_app() serves",
        _T,
        404,
    ),
    CodeInfo(
        "X_METHOD_NOT_ALLOWED",
        "this path does not answer the method",
        "send the method the Allow header names",
        _T,
        405,
    ),
    CodeInfo(
        "X_FORBIDDEN",
        "the actor lacks the permission",
        "grant the permission, or run as a system actor",
        _T,
        403,
    ),
    CodeInfo(
        "X_INVARIANT",
        "an invariant was broken",
        "fix the call the message names",
        _T,
    ),
    CodeInfo(
        "X_CONFIG_INVALID",
        "the configuration is invalid",
        "correct the setting the message names",
        _T,
    ),
    CodeInfo(
        "X_ID_INVALID",
        "the id is not a lowercase UUID",
        "pass a canonical lowercase UUID such as new_id() returns",
        _T,
        status=422,
    ),
    CodeInfo(
        "X_DURATION_INVALID",
        "the duration is invalid",
        "pass a positive duration: '500ms', '90s', '2m', '3h', '3d', '1w', '1h30m', an int of "
        "milliseconds or a datetime.timedelta",
        _T,
        status=422,
    ),
    CodeInfo(
        "X_ADAPTER_MISSING",
        "no adapter is installed for the port",
        "install one with install_adapter(port, impl)",
    ),
    CodeInfo(
        "X_MONEY_INVALID",
        "the money value is invalid",
        "use integer minor units, an ISO 4217 currency and one currency per sum",
        _T,
        status=422,
    ),
    # --- entity (ultimat3.entity) ---------------------------------------------------------
    CodeInfo(
        "X_ENTITY_VALUE_INVALID",
        "a value does not fit its column",
        "pass a value of the column's type (the message names the entity and column)",
        _T,
    ),
    CodeInfo(
        "X_ENTITY_QUERY_INVALID",
        "the query names an unknown or sealed column, or a bad operator, unit or zone",
        "query declared, unsealed columns with eq ne lt lte gt gte in like",
        _T,
    ),
    CodeInfo(
        "X_ENTITY_SCHEMA_DRIFT",
        "the table in the database differs from its declaration in a way migrate() does not change",
        "write a migration of your own (a new column, copy, swap) or restore the declared type",
        _T,
    ),
    CodeInfo(
        "X_ENTITY_WRITE_REFUSED",
        "the entity refuses this write (append-only, or a view)",
        "append a new row instead of changing one; write to a view's tables",
        _T,
    ),
    CodeInfo(
        "X_ENTITY_CONFLICT_UNCOVERED",
        "upsert_all's on_conflict columns are covered by no unique index",
        "name the columns of a unique key, or declare Index((...), unique=True)",
        _T,
    ),
    CodeInfo(
        "X_ENTITY_CONFLICT",
        "a unique key is already taken",
        "upsert_all(rows, on_conflict=[...]) to overwrite, or change the key",
        _T,
    ),
    CodeInfo(
        "X_TENANT_REQUIRED",
        "a statement on a tenant entity ran with no ambient tenant",
        "bind one with use_tenant(org_id), or cross_tenant(reason, fn) as a system actor",
        _T,
    ),
    CodeInfo(
        "X_SEALED_UNREADABLE",
        "a sealed value cannot be decrypted (its key is not in the ring, or it was altered)",
        "add the key it was sealed with back to the KeyRing",
        _T,
    ),
    CodeInfo(
        "X_SEALED_VALUE_EXPOSED",
        "a sealed column's value would be stored as JSON (a step output, a job result or "
        "input): in plaintext, outside its column",
        "checkpoint the row's id and read the value again, or .reveal() it where plaintext "
        "is meant",
        _T,
    ),
)

# --- issue 17 (ops): the operator surface's own code, and statuses for codes that had none ----
_ENTRIES += (
    CodeInfo(
        "X_JOB_ID_AMBIGUOUS",
        "the id prefix matches more than one job",
        "give more of the id: enough characters that only one job has them",
        _T,
        status=422,
    ),
)
_MORE_STATUSES: Mapping[str, int] = {
    # an HTTP handler that lets one of these through answers this status instead of a bare 500
    "X_DB_LOCK_TIMEOUT": 503,
    "X_LOCK_LOST": 503,
    "X_STORAGE_KEY_INVALID": 422,
    "X_STORAGE_NOT_FOUND": 404,
    "X_IMPORT_HEADER_MISMATCH": 422,
    "X_IMPORT_TOO_MANY_ERRORS": 422,
    "X_IMPORT_ENCODING_INVALID": 422,
    "X_WEBHOOK_ENDPOINT_UNKNOWN": 404,
    "X_WEBHOOK_ENDPOINT_INVALID": 422,
    "X_WEBHOOK_ENDPOINT_DISABLED": 409,
    "X_WEBHOOK_EVENT_UNKNOWN": 404,
    "X_ENTITY_VALUE_INVALID": 422,
    "X_ENTITY_QUERY_INVALID": 422,
    "X_ENTITY_WRITE_REFUSED": 409,
    "X_ENTITY_CONFLICT": 409,
}
_ENTRIES = tuple(
    replace(info, status=_MORE_STATUSES[info.code])
    if info.status is None and info.code in _MORE_STATUSES
    else info
    for info in _ENTRIES
)

CODES: Mapping[str, CodeInfo] = MappingProxyType({info.code: info for info in _ENTRIES})
"""Every known code, by name."""

assert len(CODES) == len(_ENTRIES), "duplicate code in the registry"
