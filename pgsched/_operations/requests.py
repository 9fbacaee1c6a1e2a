"""Operator input, parsed once: one request type per action the facades take from text (the
command line's options, the HTTP API's query strings and JSON bodies, the dashboard's forms),
each with one parser from a mapping of field -> value and one call of the operations core.

How a field is read follows from its type: a scope from ``KIND:ID``, an instant from ISO 8601,
an integer, a flag (``1``/``true``/``on``/``yes`` or ``0``/``false``/``off``/``no``), a JSON
object; a field that takes text (a job, a status, a duration) keeps it. An absent or empty
value is the field's default. A value that is no text (a JSON body's number, boolean or
object) is passed on as it is, for the core to check as it checks a Python caller's. An error
is one :class:`~pgsched.ConfigError` line naming the field as the facade calls it (``label``:
``--at`` on the command line, ``at`` elsewhere) and the value.
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime
from typing import Any, NoReturn, Union, get_args, get_origin, get_type_hints

from .._errors import ConfigError
from .._planning.schedules import check_fields
from .._structures import Execution, Explanation, Schedule, ScheduleSpec, Scope, Triggered
from .._times import parse_time
from .core import Operations

Fields = Mapping[str, object]
Label = Callable[[str], str]  # a field's name as the facade's caller writes it
_TRUE = ("1", "true", "on", "yes")
_FALSE = ("0", "false", "off", "no")


def as_named(name: str) -> str:
    """A field as the HTTP API and the dashboard name it: its own name."""
    return name


class Reader:
    """The fields of one request, each read from its text by the type of the field it fills.
    ``fixed`` are those the facade took from elsewhere (an HTTP path's job and scope):
    ``given`` may not repeat them."""

    def __init__(self, given: Fields, label: Label, fixed: Mapping[str, str] | None = None) -> None:
        self._given = {k: v for k, v in given.items() if v is not None and v != ""}
        self._repeated = sorted(set(given) & set(fixed or {}))
        self._given.update(fixed or {})
        self._label, self.where = label, ""

    def unknown(self, known: Iterable[str]) -> list[str]:
        """The names given that are no field of the request (or repeat a fixed one)."""
        return sorted({*(set(self._given) - set(known)), *self._repeated})

    def refuse_unknown(self, known: Iterable[str], noun: str = "field") -> None:
        unknown = self.unknown(known)
        if unknown:
            raise ConfigError(f"{self.where}unknown {noun} {unknown[0]!r}")

    def required(self, name: str) -> Any:
        value = self._given.get(name)
        if value is None:
            raise ConfigError(f"{self.where}the request names no {self._label(name)}")
        return value

    def fields_of(self, request: type[Any]) -> dict[str, Any]:
        """The fields of the dataclass ``request`` that were given, each read by its type."""
        found = {name: read(self, name) for name, read in _readers(request).items()}
        return {k: v for k, v in found.items() if v is not None}

    def _named(self, name: str) -> str:
        return f"{self.where}{self._label(name)}"

    def _fail(self, name: str, value: object, what: str) -> NoReturn:
        raise ConfigError(f"{self._named(name)}={value!r} {what}")

    def text(self, name: str) -> Any:
        return self._given.get(name)

    def scope(self, name: str) -> Any:
        value = self._given.get(name)
        if not isinstance(value, str):
            return value
        try:
            return Scope.parse(value, field=self._label(name))
        except ConfigError as exc:
            raise ConfigError(f"{self.where}{exc}") from None

    def time(self, name: str) -> Any:
        value = self._given.get(name)
        return parse_time(value, self._named(name)) if isinstance(value, str) else value

    def integer(self, name: str) -> Any:
        value = self._given.get(name)
        if not isinstance(value, str):
            return value
        try:
            return int(value)
        except ValueError:
            self._fail(name, value, "must be an integer")

    def flag(self, name: str) -> bool | None:
        value = self._given.get(name)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE:
            return True
        if not isinstance(value, str) or value.lower() not in _FALSE:
            self._fail(name, value, "must be true or false")
        return False

    def json_object(self, name: str) -> Any:
        value = self._given.get(name)
        if not isinstance(value, str):
            return value
        try:
            found = json.loads(value)
        except ValueError as exc:
            self._fail(name, value[:200], f"is not JSON ({exc})")
        if not isinstance(found, dict):
            raise ConfigError(f"{self._named(name)} must be a JSON object")
        return found


_READ_BY_TYPE: tuple[tuple[type, Callable[[Reader, str], Any]], ...] = (
    (str, Reader.text),  # first: a field that takes text (a duration too) keeps it
    (Scope, Reader.scope),
    (datetime, Reader.time),
    (bool, Reader.flag),  # before int, which bool is
    (int, Reader.integer),
    (dict, Reader.json_object),
)
_READABLE = tuple(kind for kind, _ in _READ_BY_TYPE)


def _readers(request: type[Any]) -> dict[str, Callable[[Reader, str], Any]]:
    """How each field of the dataclass ``request`` is read, by its annotation."""
    hints = get_type_hints(request)
    chosen = {}
    for f in fields(request):
        hint = hints[f.name]
        members = get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)
        kinds = {get_origin(m) or m for m in members}
        chosen[f.name] = next(read for kind, read in _READ_BY_TYPE if kind in kinds)
    return chosen


def field_names(request: type[Any]) -> tuple[str, ...]:
    """The fields the parser of the dataclass ``request`` reads: its own, and in place of one
    that is a dataclass read by no reader of its own (a schedule request's spec), its."""
    hints = get_type_hints(request)
    names: list[str] = []
    for f in fields(request):
        inner = hints[f.name]
        nested = isinstance(inner, type) and is_dataclass(inner) and inner not in _READABLE
        names += field_names(inner) if nested else [f.name]
    return tuple(names)


def _job_fields(request: type[Any], read: Reader, noun: str = "field") -> dict[str, Any]:
    """The fields of a request of one job (``request``), read: its errors name the job, and
    a name that is no field (a ``noun``) is refused."""
    read.where = f"job {read.required('job')!r}: "
    read.refuse_unknown(field_names(request), noun)
    return read.fields_of(request)


@dataclass(frozen=True, slots=True)
class RunsQuery:
    """``runs``: the most recent executions, filtered."""

    job: str | None = None
    status: str | None = None
    limit: int = 20
    scope: Scope | None = None
    since: datetime | None = None
    until: datetime | None = None

    @classmethod
    def parse(cls, given: Fields, label: Label = as_named) -> RunsQuery:
        read = Reader(given, label)
        read.refuse_unknown(field_names(cls))
        return cls(**read.fields_of(cls))

    async def send(self, ops: Operations) -> list[Execution]:
        return await ops.runs(
            self.job, self.status, self.limit, scope=self.scope, since=self.since, until=self.until
        )


@dataclass(frozen=True, slots=True)
class ExplainQuery:
    """``explain``: what happened to each plan of a job (or of one scope)."""

    job: str
    scope: Scope | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 50

    @classmethod
    def parse(
        cls, given: Fields, label: Label = as_named, *, fixed: Mapping[str, str] | None = None
    ) -> ExplainQuery:
        return cls(**_job_fields(cls, Reader(given, label, fixed), "parameter"))

    async def send(self, ops: Operations) -> Explanation:
        return await ops.explain(self.job, self.scope, self.since, self.until, self.limit)


@dataclass(frozen=True, slots=True)
class TriggerRequest:
    """``trigger``: a manual run of ``job`` (of ``scope``, or of every scope), now or ``at``."""

    job: str
    scope: Scope | None = None
    at: datetime | None = None
    all_scopes: bool = False

    @classmethod
    def parse(
        cls, given: Fields, label: Label = as_named, *, fixed: Mapping[str, str] | None = None
    ) -> TriggerRequest:
        return cls(**_job_fields(cls, Reader(given, label, fixed)))

    async def send(self, ops: Operations) -> list[Triggered]:
        """The runs queued (or found), one per scope: a list even for one scope."""
        if self.all_scopes:
            return await ops.trigger(self.job, self.scope, self.at, all_scopes=True)
        return [await ops.trigger(self.job, self.scope, self.at)]


@dataclass(frozen=True, slots=True)
class ScheduleRequest:
    """``put_schedule``: create or replace the schedule ``spec`` (of one scope) of ``job``."""

    job: str
    spec: ScheduleSpec

    @classmethod
    def parse(
        cls, given: Fields, label: Label = as_named, *, fixed: Mapping[str, str] | None = None
    ) -> ScheduleRequest:
        read = Reader(given, label, fixed)
        job = read.required("job")
        read.where = f"job {job!r}: "
        scope = read.scope("scope")
        if scope is None:
            read.required("scope")
        read.where = f"job {job!r}, scope {scope}: "
        check_fields(job, scope, read.unknown(field_names(cls)))
        return cls(job, ScheduleSpec(**read.fields_of(ScheduleSpec)))

    async def send(self, ops: Operations) -> Schedule:
        spec = self.spec
        given = {name: getattr(spec, name) for name in field_names(ScheduleSpec)}
        return await ops.put_schedule(self.job, **given)
