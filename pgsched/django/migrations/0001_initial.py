"""pgsched's tables, made or upgraded by pgsched's own migration (``pgsched migrate``),
which is idempotent and takes a lock, so it is safe while replicas run."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations


def migrate_pgsched(apps: Any, schema_editor: Any) -> None:
    """Apply pgsched's migrations to the database of ``PGSCHED['DATABASE']``, on its own
    connection; on any other database of a multi-database project, nothing."""
    from pgsched.django.conf import pgsched_alias, project_scheduler

    if schema_editor.connection.alias == pgsched_alias():
        project_scheduler().migrate()


def keep_tables(apps: Any, schema_editor: Any) -> None:
    """Reverse: a no-op. pgsched's tables hold the run history and schedules; unapplying
    this migration keeps them (drop the schema by hand to remove them)."""


class Migration(migrations.Migration):  # type: ignore[misc]  # Django has no type hints
    initial = True
    # pgsched's migration commits on a connection of its own: no Django transaction is held
    # open while it waits for its lock.
    atomic = False
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Any]] = [
        migrations.RunPython(migrate_pgsched, keep_tables, elidable=False)
    ]
