"""Reading a queries file: its statements by name, each with its text and cardinality.

Standard library only: ``tools/gen_statements.py`` loads this module by its path to generate
``names.py`` without importing pgsched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CARDINALITIES = ("exec", "one", "opt", "many")
# A name line: a name and its cardinality. A line that starts like one but does not match is
# an error, not a comment: it would join its statement to the one above.
NAME_LINE = re.compile(r"^-- name: (\w+) :(\w+)[ \t]*$", re.MULTILINE)
_NAME_START = re.compile(r"^--[ \t]*name\b.*$", re.MULTILINE | re.IGNORECASE)
# A parameter: psycopg's %(name)s (a literal percent sign is written %%).
PLACEHOLDER = re.compile(r"(?<!%)%\((\w+)\)s")


@dataclass(frozen=True, slots=True)
class Statement:
    """One named statement as the file has it."""

    name: str
    cardinality: str
    text: str

    @property
    def parameters(self) -> frozenset[str]:
        return frozenset(PLACEHOLDER.findall(self.text.replace("%%", "")))


def read_statements(text: str, source: str = "sql/queries.sql") -> dict[str, Statement]:
    """The statements of a queries file's ``text`` by name; ValueError for a name line
    without a known cardinality, or a name given twice."""
    for line in _NAME_START.findall(text):
        match = NAME_LINE.match(line)
        if match is None or match[2] not in CARDINALITIES:
            kinds = ", ".join(f":{c}" for c in CARDINALITIES)
            raise ValueError(
                f"{source}: {line!r} must be '-- name: NAME :KIND', KIND one of {kinds}"
            )
    parts = NAME_LINE.split(text)
    out: dict[str, Statement] = {}
    for name, cardinality, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if name in out:
            raise ValueError(f"{source}: statement {name!r} is named twice")
        out[name] = Statement(name, cardinality, body.strip())
    return out
