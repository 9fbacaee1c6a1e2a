"""``path("scheduler/", include("pgsched.django.urls"))``: pgsched's dashboard there."""

from __future__ import annotations

from django.urls import re_path

from .views import dashboard

app_name = "pgsched"
urlpatterns = [re_path(r"^(?P<page>[a-z]*)$", dashboard, name="dashboard")]
