"""pgsched in Django's admin: its jobs, with their status and next plan, paused, resumed and
triggered as admin actions (the permission ``pgsched.operate``), each recorded in pgsched's
action log as the user's (surface ``django_admin``). Read and written through pgsched's
operations core: no model of this app has a table."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse

from .._errors import PgschedError
from .._operations.audit import Actor, acting
from .._portal import PORTAL
from .models import Job
from .views import PERMISSION, operations

ACTIONS = ("pause", "resume", "trigger")


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):  # type: ignore[misc]  # Django has no type hints
    """The jobs the replicas registered, as ``pgsched status`` lists them."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

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
        if not request.user.has_perm(PERMISSION):
            raise PermissionDenied
        action, names = request.POST.get("action", ""), request.POST.getlist("job")
        if action not in ACTIONS or not names:
            messages.warning(request, "Choose an action and at least one job.")
            return HttpResponseRedirect(request.path)
        ops = acting(operations(), Actor("django_admin", request.user.get_username()))
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
