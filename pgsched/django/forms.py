"""The forms of pgsched's admin pages: the filter of the executions page and the schedule
form of a dynamic job. They only parse what the user typed; every rule of pgsched's (a cron
expression, a timezone, a payload a job refuses) is the operations core's, whose one-line
error the page shows on the form."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, get_args

from django import forms

from .._errors import ConfigError
from .._operations.core import RUN_STATUSES
from .._planning.calendars import OnExcluded
from .._structures import Schedule, ScheduleSpec, Scope
from .._times import format_duration

PAGE = 50  # executions per page, unless ?limit= says otherwise
MAX_PAGE = 500


class ExecutionFilter(forms.Form):  # type: ignore[misc]  # Django has no type hints
    """The executions page's GET parameters: its filters and the keyset of its page."""

    job = forms.ChoiceField(required=False)
    status = forms.ChoiceField(
        required=False, choices=[("", "any")] + [(s, s) for s in RUN_STATUSES]
    )
    scope = forms.CharField(required=False, help_text="KIND:ID")
    since = forms.DateTimeField(required=False, help_text="plans at or after")
    until = forms.DateTimeField(required=False, help_text="plans before")
    limit = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE)
    # The last row of the previous page: (plan time, job, scope).
    after_plan = forms.CharField(required=False, widget=forms.HiddenInput)
    after_job = forms.CharField(required=False, widget=forms.HiddenInput)
    after_scope = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, data: Any, jobs: list[str]) -> None:
        super().__init__(data)
        asked = data.get("job", "")
        names = sorted({*jobs, asked} - {""})  # a job no replica registers may have rows
        self.fields["job"].choices = [("", "any")] + [(j, j) for j in names]

    def clean_scope(self) -> Scope | None:
        try:
            return _scope(self.cleaned_data.get("scope", ""), "scope")
        except ConfigError as exc:
            raise forms.ValidationError(str(exc)) from None

    def query(self) -> dict[str, Any]:
        """The keyword arguments of the core's ``runs`` (the page's filters and keyset)."""
        data = self.cleaned_data
        return {
            "job": data.get("job") or None,
            "status": data.get("status") or None,
            "scope": data.get("scope"),
            "since": data.get("since"),
            "until": data.get("until"),
            "after": self._after(),
        }

    def page_size(self) -> int:
        return int(self.cleaned_data.get("limit") or PAGE)

    def _after(self) -> tuple[datetime, str, Scope] | None:
        data = self.cleaned_data
        if not data.get("after_plan"):
            return None
        try:
            plan = datetime.fromisoformat(data["after_plan"])
        except ValueError:
            raise ConfigError(f"after_plan={data['after_plan']!r} is not an ISO time") from None
        scope = _scope(data.get("after_scope", ""), "after_scope")
        if scope is None:
            raise ConfigError("after_scope is missing: the next page needs KIND:ID")
        return plan, data.get("after_job", ""), scope


class ScheduleForm(forms.Form):  # type: ignore[misc]  # Django has no type hints
    """One schedule of a dynamic job, as the admin creates or edits it."""

    scope = forms.CharField(help_text="KIND:ID, e.g. tenant:42")
    every = forms.CharField(required=False, help_text='a duration: "15m", "1h", seconds')
    cron = forms.CharField(required=False, help_text='5 fields, e.g. "0 9 * * 1-5"')
    timezone = forms.CharField(initial="UTC", help_text="the cron's timezone (IANA name)")
    payload = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 4}), help_text="a JSON object"
    )
    starts_at = forms.DateTimeField(required=False, help_text="no plan before")
    ends_at = forms.DateTimeField(required=False, help_text="no plan at or after")
    calendar = forms.CharField(
        required=False, help_text="a calendar the scheduler registers (Scheduler.calendar)"
    )
    on_excluded = forms.ChoiceField(
        choices=[(name, name) for name in get_args(OnExcluded)],
        initial="skip",
        help_text="what a plan on a day the calendar excludes does",
    )

    def clean_scope(self) -> Scope:
        try:
            found = _scope(self.cleaned_data.get("scope", ""), "scope")
        except ConfigError as exc:
            raise forms.ValidationError(str(exc)) from None
        if found is None:
            raise forms.ValidationError("a scope is needed (KIND:ID)")
        return found

    def clean_payload(self) -> dict[str, Any] | None:
        text = self.cleaned_data.get("payload", "").strip()
        if not text:
            return None
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"payload is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("payload must be a JSON object")
        return value

    def spec(self, paused: bool) -> ScheduleSpec:
        """What was typed as a ``ScheduleSpec``, unchecked (the core checks it)."""
        data = self.cleaned_data
        return ScheduleSpec(
            scope=data["scope"],
            every=data.get("every") or None,
            cron=data.get("cron") or None,
            timezone=data.get("timezone") or "UTC",
            payload=data.get("payload"),
            starts_at=data.get("starts_at"),
            ends_at=data.get("ends_at"),
            paused=paused,
            calendar=data.get("calendar") or None,
            on_excluded=data.get("on_excluded") or "skip",
        )


def schedule_initial(schedule: Schedule) -> dict[str, Any]:
    """A stored schedule as the form's initial values."""
    every = schedule.every
    return {
        "scope": str(schedule.scope),
        "every": "" if every is None else format_duration(every),
        "cron": schedule.cron or "",
        "timezone": schedule.timezone,
        "payload": json.dumps(schedule.payload) if schedule.payload else "",
        "starts_at": schedule.starts_at,
        "ends_at": schedule.ends_at,
        "calendar": schedule.calendar or "",
        "on_excluded": schedule.on_excluded,
    }


def _scope(text: str, field: str) -> Scope | None:
    text = (text or "").strip()
    return Scope.parse(text, field=field) if text else None
