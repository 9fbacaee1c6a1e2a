"""pgsched's dashboard in the project's URLs (``path("scheduler/",
include("pgsched.django.urls"))``), behind Django's authentication: staff users read it,
those with the permission ``pgsched.operate`` (superusers have it) act; everyone else is sent
to the login page. The pages are the dashboard's own, rendered on the server, over the
operations core; each action is recorded as the Django user's."""

from __future__ import annotations

import functools

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from .._facades.http.auth import Caller
from .._facades.http.web import Dashboard, WebRequest
from .._operations.core import Operations
from .._portal import PORTAL
from .conf import project_scheduler

PERMISSION = "pgsched.operate"


# The dashboard refuses a form whose Origin is not the Host Django has validated against
# ALLOWED_HOSTS (and Django's session cookie is SameSite): it needs no CSRF token in its forms.
@csrf_exempt  # type: ignore[untyped-decorator]  # Django has no type hints
def dashboard(request: HttpRequest, page: str = "") -> HttpResponse:
    """Every page and action of the dashboard under its mount."""
    user = request.user
    if not (user.is_active and user.is_staff):
        return redirect_to_login(request.get_full_path())
    role = "operator" if user.has_perm(PERMISSION) else "viewer"
    answer = PORTAL.call(
        _dashboard().handle(
            _request(request, page, Caller(role, True, user.get_username(), external=True))
        )
    )
    response = HttpResponse(answer.body, status=answer.status, content_type=answer.content_type)
    for name, value in answer.headers:
        response[name] = value
    return response


def operations() -> Operations:
    """The operations core of the project's scheduler, its coroutines run on the portal."""
    return project_scheduler().admin.operations


@functools.cache
def _dashboard() -> Dashboard:
    return Dashboard(operations())


def _request(request: HttpRequest, page: str, caller: Caller) -> WebRequest:
    return WebRequest(
        method=request.method or "GET",
        path="/" + page,
        query=dict(request.GET.items()),
        form=dict(request.POST.lists()),
        headers={k.lower(): v for k, v in request.headers.items()},
        cookies=dict(request.COOKIES),
        root=request.path[: len(request.path) - len(page)],
        secure=request.is_secure(),
        remote=str(request.META.get("REMOTE_ADDR", "")),
        local=request.get_host(),
        caller=caller,
    )
