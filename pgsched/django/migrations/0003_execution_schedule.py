"""The ``Execution`` and ``Schedule`` models, for their admin pages and view permissions
(they have no table)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations, models


def _unmanaged(name: str) -> Any:
    return migrations.CreateModel(
        name=name,
        fields=[
            (
                "id",
                models.BigAutoField(
                    auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                ),
            ),
        ],
        options={"managed": False, "default_permissions": ("view",)},
    )


class Migration(migrations.Migration):  # type: ignore[misc]  # Django has no type hints
    dependencies: ClassVar[list[tuple[str, str]]] = [("pgsched", "0002_job")]
    operations: ClassVar[list[Any]] = [_unmanaged("Execution"), _unmanaged("Schedule")]
