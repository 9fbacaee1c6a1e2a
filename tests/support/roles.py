"""The owner and runtime roles of ``sql/roles.sql``, made once per session by the integration
tests' ``db_roles`` fixture, so that their schedulers run with the privileges production
replicas have."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from psycopg.conninfo import make_conninfo

Role = Literal["runtime", "owner", "superuser"]
ROLES_SQL = Path(__file__).resolve().parents[2] / "sql" / "roles.sql"


@dataclass
class DbRoles:
    """The session's owner and runtime roles (or, when they cannot be made, the plain DSN)."""

    admin_dsn: str
    owner: str | None = None
    runtime: str | None = None
    owner_password: str = ""
    runtime_password: str = ""
    psql: str | None = None
    prepared: set[str] = field(default_factory=set)

    @property
    def enabled(self) -> bool:
        return self.owner is not None and self.runtime is not None

    def dsn(self, role: Role) -> str:
        if not self.enabled or role == "superuser":
            return self.admin_dsn
        user, password = (
            (self.owner, self.owner_password)
            if role == "owner"
            else (self.runtime, self.runtime_password)
        )
        return make_conninfo(self.admin_dsn, user=user, password=password)

    def prepare(self, schema: str) -> None:
        """Run ``sql/roles.sql`` for ``schema`` (once per schema): the owner owns it, the
        runtime role gets DML on its tables, now and through default privileges later."""
        if not self.enabled or schema in self.prepared:
            return
        assert self.psql is not None
        variables = {
            "schema": schema,
            "owner": self.owner,
            "runtime": self.runtime,
            "owner_password": self.owner_password,
            "runtime_password": self.runtime_password,
        }
        args = [a for k, v in variables.items() for a in ("-v", f"{k}={v}")]
        done = subprocess.run(
            [self.psql, "-X", "-q", self.admin_dsn, *args, "-f", str(ROLES_SQL)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"sql/roles.sql failed: {done.stderr}"
        self.prepared.add(schema)
