"""The ``Job`` model, for its permission ``pgsched.operate`` (it has no table)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations, models


class Migration(migrations.Migration):  # type: ignore[misc]  # Django has no type hints
    dependencies: ClassVar[list[tuple[str, str]]] = [("pgsched", "0001_initial")]
    operations: ClassVar[list[Any]] = [
        migrations.CreateModel(
            name="Job",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
            ],
            options={
                "managed": False,
                "default_permissions": ("view",),
                "permissions": [("operate", "Can pause, resume, trigger and retry pgsched's jobs")],
            },
        ),
    ]
