"""The dashboard's actions: a posted form translated into calls of the operations core, which
records each in the action log as the caller's (surface ``dashboard``). A form with several
``target`` values is a bulk action: one call per target."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from .._errors import ConfigError, NotFoundError
from .._model import Scope
from .._operations.audit import Actor, acting
from .._operations.core import Operations
from .._operations.dashboard import each
from .._times import parse_time

Form = Mapping[str, Sequence[str]]
ACTIONS = (
    "trigger",
    "pause",
    "resume",
    "cancel",
    "retry",
    "schedule_put",
    "schedule_pause",
    "schedule_resume",
    "schedule_delete",
)


def one(form: Form, name: str) -> str:
    values = form.get(name) or [""]
    return values[0].strip()


def question(form: Form) -> str | None:
    """What to ask a signed-in browser before a destructive action (None: nothing to ask, or
    already confirmed: the form carries ``confirmed=yes``)."""
    if one(form, "action") != "schedule_delete" or one(form, "confirmed") == "yes":
        return None
    targets = [t for t in form.get("target", ()) if t.strip()]
    job = one(form, "job")
    if targets:
        return f"Delete {len(targets)} schedule(s) of {job}: {', '.join(targets[:5])}?"
    return f"Delete the schedule {one(form, 'scope')} of {job}?"


class ActionForm:
    """One posted action by ``actor``; :meth:`run` returns what to tell the operator."""

    def __init__(self, ops: Operations, actor: Actor, form: Form) -> None:
        self._ops, self._form = acting(ops, actor), form
        self.action = one(form, "action")
        if self.action not in ACTIONS:
            raise ConfigError(f"unknown action {self.action!r}")
        self.targets = [t.strip() for t in form.get("target", ()) if t.strip()]

    async def run(self) -> str:
        handler: Callable[[], Awaitable[str]] = getattr(self, "_" + self.action)
        return await handler()

    async def _bulk(self, work: Callable[[str], Awaitable[object]]) -> str:
        errors = await each(self.targets, work)
        failed = {t: e for t, e in errors.items() if e}
        text = f"{self.action}: {len(errors) - len(failed)} of {len(errors)} done"
        if failed:
            first = next(iter(failed.items()))
            text += f"; {len(failed)} failed (first: {first[0]}: {first[1]})"
        return text

    async def _trigger(self) -> str:
        job = self._job()
        at = _at(one(self._form, "at"))
        if self.targets:
            return await self._bulk(lambda t: self._ops.trigger(job, Scope.parse(t), at))
        if one(self._form, "all_scopes"):
            rows = await self._ops.trigger(job, None, at, all_scopes=True)
            queued = sum(1 for r in rows if r.created)
            said = f"triggered {job}: {queued} run(s) queued"
            return "; ".join((said, *(rows[0].warnings if rows else ())))
        text = one(self._form, "scope")
        scope = Scope.parse(text) if text else None
        done = await self._ops.trigger(job, scope, at)
        if done.scheduled_plan:
            said = f"triggered {job} ({done.scope}): nothing added, the scheduled plan covers it"
        else:
            verb = "queued" if done.created else "already queued"
            said = f"triggered {job} ({done.scope}): run {done.id} {verb}"
        return "; ".join((said, *done.warnings))

    async def _pause(self) -> str:
        return await self._jobs(self._ops.pause, "paused")

    async def _resume(self) -> str:
        return await self._jobs(self._ops.resume, "resumed")

    async def _jobs(self, work: Callable[[str], Awaitable[None]], done: str) -> str:
        if self.targets:
            return await self._bulk(work)
        job = self._job()
        await work(job)
        return f"{job} {done}"

    async def _cancel(self) -> str:
        return await self._runs(self._ops.cancel, "cancelled")

    async def _retry(self) -> str:
        return await self._runs(self._ops.retry_now, "due for a retry now")

    async def _runs(self, work: Callable[[str], Awaitable[object]], done: str) -> str:
        if self.targets:
            return await self._bulk(work)
        ident = one(self._form, "id")
        await work(ident)
        return f"run {ident} {done}"

    async def _schedule_put(self) -> str:
        job, text = self._job(), one(self._form, "scope")
        scope = Scope.parse(text)
        fields: dict[str, Any] = {"timezone": one(self._form, "timezone") or "UTC"}
        cron, every = one(self._form, "cron"), one(self._form, "every")
        if cron:
            fields["cron"] = cron
        if every:
            fields["every"] = every
        fields["payload"] = _payload(one(self._form, "payload"))
        fields["paused"] = bool(one(self._form, "paused"))
        await self._ops.put_schedule(job, scope, **fields)
        return f"schedule {scope} of {job} saved"

    async def _schedule_pause(self) -> str:
        return await self._schedules(self._ops.pause_schedule, "paused")

    async def _schedule_resume(self) -> str:
        return await self._schedules(self._ops.resume_schedule, "resumed")

    async def _schedule_delete(self) -> str:
        async def delete(job: str, scope: Scope) -> None:
            if not await self._ops.delete_schedule(job, scope):
                raise NotFoundError(f"job {job!r}, scope {scope}: no such schedule")

        return await self._schedules(delete, "deleted")

    async def _schedules(self, work: Callable[[str, Scope], Awaitable[None]], done: str) -> str:
        job = self._job()
        if self.targets:
            return await self._bulk(lambda t: work(job, Scope.parse(t)))
        text = one(self._form, "scope")
        await work(job, Scope.parse(text))
        return f"schedule {text} of {job} {done}"

    def _job(self) -> str:
        job = one(self._form, "job")
        if not job:
            raise ConfigError("the form names no job")
        return job


def _at(text: str) -> datetime | None:
    """A time from the form (a browser's datetime-local is read as UTC), or None."""
    return parse_time(text, "at") if text else None


def _payload(text: str) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        raise ConfigError(f"payload={text[:200]!r} is not JSON") from None
    if not isinstance(value, dict):
        raise ConfigError("payload must be a JSON object")
    return value
