"""pgsched in Django's admin: its jobs, with their status and next plan, paused, resumed and
triggered as admin actions (the permission ``pgsched.operate``), each recorded in pgsched's
action log as the user's (surface ``django_admin``); the executions of the ledger, filtered
and paged by keyset, each with its attempts; the schedules of dynamic jobs, created, edited,
paused, resumed and deleted. Read and written through pgsched's operations core: no model of
this app has a table."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from .._errors import NotFoundError, PgschedError
from .._operations.audit import Actor, acting
from .._operations.core import Operations
from .._portal import PORTAL
from .._structures import SCHEDULE_FIELDS, JobStatus, Scope
from .._structures import Execution as Run
from .._structures import Schedule as Stored
from .._times import format_duration
from .forms import ExecutionFilter, ScheduleForm, schedule_initial
from .models import Execution, Job, Schedule
from .views import PERMISSION, operations

ACTIONS = ("pause", "resume", "trigger")


SCHEDULE_ACTIONS = ("pause", "resume", "delete")
SCHEDULE_PAGE = 100


class ReadThroughCore(admin.ModelAdmin):  # type: ignore[misc]  # Django has no type hints
    """A page over pgsched's operations core: Django's add, change and delete do not apply
    (there is no table); writes are the page's own, under ``pgsched.operate``."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def context(self, request: HttpRequest, title: str, **more: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.opts,
            "can_act": request.user.has_perm(PERMISSION),
            **more,
        }


def acting_as(request: HttpRequest) -> Operations:
    """The core with its actions recorded as the request's user's, once the user may act."""
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied
    return acting(operations(), Actor("django_admin", request.user.get_username()))


@admin.register(Job)
class JobAdmin(ReadThroughCore):
    """The jobs the replicas registered, as ``pgsched status`` lists them."""

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return self._act(request)
        context = {
            **self.admin_site.each_context(request),
            "title": "Jobs",
            "opts": self.opts,
            "jobs": PORTAL.call(operations().status()),
            "can_act": request.user.has_perm(PERMISSION),
        }
        return TemplateResponse(request, "admin/pgsched/job/change_list.html", context)

    def _act(self, request: HttpRequest) -> HttpResponse:
        ops = acting_as(request)
        action, names = request.POST.get("action", ""), request.POST.getlist("job")
        if action not in ACTIONS or not names:
            messages.warning(request, "Choose an action and at least one job.")
            return HttpResponseRedirect(request.path)
        failed: dict[str, str] = {}
        for name in names:
            work = (
                ops.trigger(name, all_scopes=True)
                if action == "trigger"
                else getattr(ops, action)(name)
            )
            try:
                PORTAL.call(work)
            except PgschedError as exc:
                failed[name] = str(exc)
        done = len(names) - len(failed)
        messages.success(request, f"{action.capitalize()}: {done} of {len(names)} job(s) done")
        for name, why in failed.items():
            messages.error(request, f"{action} {name}: {why}")
        return HttpResponseRedirect(request.path)


@admin.register(Execution)
class ExecutionAdmin(ReadThroughCore):
    """The ledger's executions, newest plan first, filtered by job, status, scope and plan
    time, in keyset pages (no count of the ledger, no offset); each opens on its attempts."""

    def get_urls(self) -> list[URLPattern]:
        detail = self.admin_site.admin_view(self.detail_view)
        return [
            path("<uuid:execution_id>/", detail, name="pgsched_execution_detail"),
            *super().get_urls(),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        form = ExecutionFilter(request.GET, [j.job for j in _overview()])
        rows: list[Run] = []
        following, error = None, None
        if form.is_valid():
            size = form.page_size()
            try:
                # One row past the page: whether there is a next page, without a count.
                found = PORTAL.call(operations().runs(limit=size + 1, **form.query()))
            except PgschedError as exc:
                error = str(exc)
            else:
                rows = found[:size]
                if len(found) > size:
                    following = next_page(request.GET, rows[-1])
        context = self.context(
            request, "Executions", form=form, rows=rows, next_page=following, error=error
        )
        return TemplateResponse(request, "admin/pgsched/execution/change_list.html", context)

    def detail_view(self, request: HttpRequest, execution_id: Any) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            history = PORTAL.call(operations().run(execution_id))
        except NotFoundError as exc:
            raise Http404(str(exc)) from None
        context = self.context(
            request,
            f"Execution {history.execution.id}",
            execution=history.execution,
            attempts=history.attempts,
        )
        return TemplateResponse(request, "admin/pgsched/execution/detail.html", context)


def _overview() -> list[JobStatus]:
    """The jobs, for the pages that only name them: the dashboard's overview, whose counts
    stop at a cap (``status()`` counts every failed row of a long ledger)."""
    return PORTAL.call(operations().job_overview())


def next_page(query: QueryDict, last: Run) -> str:
    """The query of the page after ``last``: the same filters, the keyset of ``last``."""
    following = query.copy()
    following["after_plan"] = last.plan_time.isoformat()
    following["after_job"] = last.job
    following["after_scope"] = str(last.scope)
    return str(following.urlencode())


@admin.register(Schedule)
class ScheduleAdmin(ReadThroughCore):
    """The schedules of a dynamic job (``?job=``), in scope order, in keyset pages; created
    and edited through a form, paused, resumed and deleted as actions."""

    def get_urls(self) -> list[URLPattern]:
        edit = self.admin_site.admin_view(self.edit_view)
        return [path("edit/", edit, name="pgsched_schedule_edit"), *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return self._act(request)
        job = request.GET.get("job", "")
        dynamic = [j.job for j in _overview() if j.schedule == "dynamic"]
        schedules: list[Stored] = []
        following = None
        if job:
            try:
                after = request.GET.get("after")
                start = Scope.parse(after, job, field="after") if after else None
                found = PORTAL.call(
                    operations().list_schedules(job, after=start, limit=SCHEDULE_PAGE + 1)
                )
            except PgschedError as exc:
                messages.error(request, str(exc))
            else:
                schedules = found[:SCHEDULE_PAGE]
                if len(found) > SCHEDULE_PAGE:
                    following = QueryDict(mutable=True)
                    following.update({"job": job, "after": str(schedules[-1].scope)})
        context = self.context(
            request,
            "Schedules" + (f" of {job}" if job else ""),
            job=job,
            jobs=sorted({*dynamic, job} - {""}),
            schedules=[(s, "" if s.every is None else format_duration(s.every)) for s in schedules],
            next_page=None if following is None else following.urlencode(),
        )
        return TemplateResponse(request, "admin/pgsched/schedule/change_list.html", context)

    def _act(self, request: HttpRequest) -> HttpResponse:
        ops = acting_as(request)
        job, action = request.POST.get("job", ""), request.POST.get("action", "")
        back = HttpResponseRedirect(request.path + "?" + _job_query(job))
        scopes = request.POST.getlist("scope")
        if action not in SCHEDULE_ACTIONS or not scopes:
            messages.warning(request, "Choose an action and at least one schedule.")
            return back
        done = 0
        for text in scopes:
            try:
                scope = Scope.parse(text, job)
                # delete answers False for no schedule; pause and resume raise NotFoundError
                if PORTAL.call(getattr(ops, f"{action}_schedule")(job, scope)) is False:
                    raise NotFoundError(f"job {job!r}, scope {scope}: no such schedule")
                done += 1
            except PgschedError as exc:
                messages.error(request, f"{action} {text}: {exc}")
        messages.success(
            request, f"{action.capitalize()}: {done} of {len(scopes)} schedule(s) done"
        )
        return back

    def edit_view(self, request: HttpRequest) -> HttpResponse:
        """A new schedule of ``?job=``, or the one of ``?scope=`` (its scope fixed)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        job, editing = request.GET.get("job", ""), request.GET.get("scope", "")
        if not job:
            messages.warning(request, "Choose a dynamic job first.")
            return HttpResponseRedirect("../")
        stored = self._stored(job, editing) if editing else None
        initial = schedule_initial(stored) if stored is not None else {}
        if request.method != "POST":
            form = ScheduleForm(initial=initial)
        else:
            form = ScheduleForm(request.POST, initial=initial)
        form.fields["scope"].disabled = bool(editing)
        if request.method == "POST" and self._put(request, job, form, stored):
            return HttpResponseRedirect("../?" + _job_query(job))
        title = f"Schedule {editing} of {job}" if editing else f"New schedule of {job}"
        context = self.context(request, title, job=job, form=form, editing=editing)
        return TemplateResponse(request, "admin/pgsched/schedule/edit.html", context)

    def _stored(self, job: str, scope: str) -> Stored:
        try:
            found = PORTAL.call(operations().get_schedule(job, Scope.parse(scope, job)))
        except PgschedError as exc:
            raise Http404(str(exc)) from None
        if found is None:
            raise Http404(f"job {job!r}, scope {scope}: no such schedule")
        return found

    def _put(
        self, request: HttpRequest, job: str, form: ScheduleForm, stored: Stored | None
    ) -> bool:
        """Write the form's schedule; False, with the core's error on the form, if refused.
        An edit keeps the schedule paused or not as it was; an add does not replace one."""
        ops = acting_as(request)
        if not form.is_valid():
            return False
        spec = form.spec(paused=stored is not None and stored.paused)
        try:
            if stored is None and PORTAL.call(ops.get_schedule(job, spec.scope)) is not None:
                form.add_error("scope", f"{spec.scope} has a schedule already: edit it instead")
                return False
            fields = {name: getattr(spec, name) for name in SCHEDULE_FIELDS}
            PORTAL.call(ops.put_schedule(job, spec.scope, **fields))
        except PgschedError as exc:
            form.add_error(None, str(exc))
            return False
        messages.success(request, f"Schedule {spec.scope} of {job} saved")
        return True


def _job_query(job: str) -> str:
    query = QueryDict(mutable=True)
    query["job"] = job
    return str(query.urlencode())
