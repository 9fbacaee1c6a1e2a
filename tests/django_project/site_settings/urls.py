"""The test project's URLs: Django's admin, and pgsched's dashboard under /scheduler/."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("scheduler/", include("pgsched.django.urls")),
]
