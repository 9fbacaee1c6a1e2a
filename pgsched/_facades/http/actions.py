"""The dashboard's actions: a posted form translated into calls of the operations core, which
records each in the action log as the caller's (surface ``dashboard``). A form with several
``target`` values is a bulk action: one call per target."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol, Self, TypeVar

from ..._errors import ConfigError, NotFoundError
from ..._operations.audit import Action, Actor, acting
from ..._operations.core import Operations
from ..._operations.dashboard import each
from ..._operations.requests import Fields, ScheduleRequest, TriggerRequest, field_names
from ..._structures import Scope

Form = Mapping[str, Sequence[str]]


class _Parsed(Protocol):
    @classmethod
    def parse(cls, given: Fields) -> Self: ...


_Q = TypeVar("_Q", bound=_Parsed)
# What the dashboard's forms may post as ``action``: each its handler ``_<action>`` below.
ACTIONS = (
    Action.TRIGGER,
    Action.PAUSE,
    Action.RESUME,
    Action.CANCEL,
    Action.RETRY,
    Action.SCHEDULE_PUT,
    Action.SCHEDULE_PAUSE,
    Action.SCHEDULE_RESUME,
    Action.SCHEDULE_DELETE,
)


def one(form: Form, name: str) -> str:
    values = form.get(name) or [""]
    return values[0].strip()


def question(form: Form) -> str | None:
    """What to ask a signed-in browser before a destructive action (None: nothing to ask, or
    already confirmed: the form carries ``confirmed=yes``)."""
    if one(form, "action") != Action.SCHEDULE_DELETE or one(form, "confirmed") == "yes":
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
        if self.targets:
            return await self._bulk(
                lambda t: self._request(TriggerRequest, scope=t).send(self._ops)
            )
        trigger = self._request(TriggerRequest)
        rows = await trigger.send(self._ops)
        job = trigger.job
        if trigger.all_scopes:
            queued = sum(1 for r in rows if r.created)
            said = f"triggered {job}: {queued} run(s) queued"
            return "; ".join((said, *(rows[0].warnings if rows else ())))
        done = rows[0]
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
        put = self._request(ScheduleRequest)
        await put.send(self._ops)
        return f"schedule {put.spec.scope} of {put.job} saved"

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

    def _request(self, kind: type[_Q], **chosen: str) -> _Q:
        """The request ``kind`` from the form's fields (one of the targets ``chosen``)."""
        fields = {name: one(self._form, name) for name in field_names(kind)}
        fields["job"] = self._job()
        return kind.parse({**fields, **chosen})
