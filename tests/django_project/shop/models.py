"""The shop's one model: what its jobs write through Django's ORM."""

from __future__ import annotations

from django.db import models


class Order(models.Model):  # type: ignore[misc]  # Django has no type hints
    name = models.CharField(max_length=200)
    created = models.DateTimeField(auto_now_add=True)
