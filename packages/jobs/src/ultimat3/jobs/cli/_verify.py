"""``x verify --app module:attribute``: the app's declaration problems, found without running
anything.

The app is imported (a declaration a factory refuses — a rollup with no lookback, a view refresh
of a table — is a finding, not a traceback); its jobs and subjects are what the attribute holds
(a job, a subject, or a list / tuple / dict of them) plus every job and ``define_subject()`` at
the top of that module, plus the subject of each ``subject_erase`` / ``subject_export`` job.
Findings: duplicate step names read from each body (``X_STEP_DUPLICATE``), and over the subjects
every plan refusal (``X_SUBJECT_TABLE_UNDECLARED``, ``X_SUBJECT_TREATMENT_INVALID``,
``X_SUBJECT_CYCLE``) and the personal-data checks (``X_PERSONAL_DATA_UNERASED`` /
``X_PERSONAL_DATA_UNREACHED``). Any finding exits 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ultimat3.core import XError
from ultimat3.jobs.cli._invocation import Commands, Invocation, add_command
from ultimat3.jobs.cli._output import EXIT_ERROR, Answer, clip, table
from ultimat3.jobs.cli._step_names import duplicate_steps

APP_FIX = (
    "pass --app myapp.jobs:JOBS, where JOBS is a list of the app's jobs and subjects (or one "
    "of them), importable from the current directory"
)


@dataclass(slots=True)
class LoadedApp:
    """What ``--app`` names: its jobs and subjects, and the refusals its import raised."""

    spec: str
    jobs: list[Any] = field(default_factory=list)
    subjects: list[Any] = field(default_factory=list)
    findings: list[XError] = field(default_factory=list)


def _import(spec: str) -> tuple[ModuleType, str]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise XError(
            "X_CONFIG_INVALID",
            f"--app {spec!r} is not module:attribute",
            fix=APP_FIX,
            meta={"app": spec},
        )
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)  # as `python -m` would: the app's own package is importable
    try:
        return importlib.import_module(module_name), attr
    except ModuleNotFoundError as exc:
        if exc.name is not None and (
            module_name == exc.name or module_name.startswith(exc.name + ".")
        ):
            raise XError(
                "X_CONFIG_INVALID",
                f"--app {spec!r}: there is no module named {module_name!r} (from {cwd})",
                fix="run x from the app's root, or install the app into this environment",
                meta={"app": spec},
            ) from exc
        raise _import_failed(spec, module_name, exc) from exc
    except XError:
        raise
    except Exception as exc:
        raise _import_failed(spec, module_name, exc) from exc


def _import_failed(spec: str, module_name: str, exc: BaseException) -> XError:
    return XError(
        "X_CONFIG_INVALID",
        f"--app {spec!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}",
        fix=f"python -c 'import {module_name}' shows the traceback; fix the module first",
        meta={"app": spec},
    )


def load_app(spec: str) -> LoadedApp:
    """Import ``spec`` and gather its jobs and subjects; a declaration refusal raised while
    importing (an ``XError``) is kept as a finding. A bad ``spec`` raises ``X_CONFIG_INVALID``."""
    from ultimat3.jobs import Job

    subject_mod = _subject_module()
    loaded = LoadedApp(spec)
    try:
        module, attr = _import(spec)
    except XError as exc:
        if exc.code == "X_CONFIG_INVALID" and exc.meta.get("app") == spec:
            raise
        loaded.findings.append(exc)  # a factory refused a declaration at import
        return loaded
    found: Any = module
    for part in attr.split("."):
        if not hasattr(found, part):
            raise XError(
                "X_CONFIG_INVALID",
                f"--app {spec!r}: module {module.__name__!r} has no attribute {attr!r}",
                fix=APP_FIX,
                meta={"app": spec},
            )
        found = getattr(found, part)
    if isinstance(found, Mapping):
        given: list[Any] = list(found.values())
    elif isinstance(found, list | tuple | set | frozenset):
        given = list(found)
    else:
        given = [found]
    others = [v for v in given if not isinstance(v, Job) and not _is_subject(v, subject_mod)]
    if others:
        raise XError(
            "X_CONFIG_INVALID",
            f"--app {spec!r} holds {type(others[0]).__name__} {clip(repr(others[0]), 60)}, "
            "neither a job nor a define_subject()",
            fix=APP_FIX,
            meta={"app": spec},
        )
    every = [*given, *vars(module).values()]
    for value in every:
        if isinstance(value, Job) and all(value is not j for j in loaded.jobs):
            loaded.jobs.append(value)
    subjects = [v for v in every if _is_subject(v, subject_mod)]
    if subject_mod is not None:
        subjects += [s for j in loaded.jobs if (s := subject_mod.subject_of_job(j)) is not None]
    for s in subjects:
        if all(s is not t for t in loaded.subjects):
            loaded.subjects.append(s)
    return loaded


def _subject_module() -> Any:
    """``ultimat3.jobs.factories.subject`` when ultimat3-entity is installed (else no subject
    can exist)."""
    try:
        from ultimat3.jobs.factories import subject
    except ImportError:  # pragma: no cover - the [entity] extra is missing
        return None
    return subject


def _is_subject(value: object, subject_mod: Any) -> bool:
    return subject_mod is not None and isinstance(value, subject_mod.Subject)


def declaration_findings(loaded: LoadedApp) -> list[XError]:
    """Every finding of ``x verify``: the import's, the step names', the subjects'."""
    findings = list(loaded.findings)
    for job in loaded.jobs:
        findings += duplicate_steps(job)
    if loaded.subjects:
        findings += _subject_module().personal_data_problems(loaded.subjects)
    return findings


def findings_answer(
    command: str, loaded: LoadedApp, findings: Sequence[XError], **extra: Any
) -> Answer:
    """The answer of ``x verify`` / ``x exercise``: exit 1 when anything was found."""
    data = {
        "app": loaded.spec,
        "jobs": [j.name for j in loaded.jobs],
        "subjects": [s.name for s in loaded.subjects],
        **extra,
        "findings": [f.to_dict() for f in findings],
    }
    head = (
        f"x {command}: {len(loaded.jobs)} job(s), {len(loaded.subjects)} subject(s) from "
        f"{loaded.spec}"
    )
    if not findings:
        return Answer(data, f"{head}: no findings")
    rows = [
        (f.code, clip(f.meta.get("table") or f.meta.get("job") or "-", 24), f.message, f.fix or "-")
        for f in findings
    ]
    text = f"{head}: {len(findings)} finding(s)\n" + table(("CODE", "WHERE", "WHAT", "FIX"), rows)
    return Answer(data, text, exit_code=EXIT_ERROR)


def register(root: Commands, common: argparse.ArgumentParser) -> None:
    p = add_command(
        root,
        "verify",
        summary="report the app's declaration problems (duplicate step names, undeclared "
        "subject tables, personal data left unerased or unreached, refused rollups and views) "
        "without running anything; exits 1 on any finding",
        handler=cmd_verify,
        common=common,
    )
    p.add_argument(
        "--app",
        required=True,
        metavar="MODULE:ATTR",
        help="the app's jobs and subjects, e.g. myapp.jobs:JOBS",
    )


async def cmd_verify(inv: Invocation) -> Answer:
    loaded = load_app(inv.args.app)
    return findings_answer("verify", loaded, declaration_findings(loaded))


__all__ = ["LoadedApp", "declaration_findings", "findings_answer", "load_app", "register"]
