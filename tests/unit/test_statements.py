"""Every call of a named statement, read from the storage modules' source: its helper is the
one of the statement's cardinality (``:exec``, ``:one``, ``:opt``, ``:many`` on its name
line), every placeholder of the statement is passed, and every statement is called."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pgsched._storage.sqlfile import read_statements
from pgsched._storage.statements import statements

PACKAGE = Path(__file__).resolve().parents[2] / "pgsched"
STORAGE = PACKAGE / "_storage"
# Where the records a call's parameters come from are defined.
RECORD_MODULES = (PACKAGE / "_records.py", PACKAGE / "_structures.py")
HELPERS = {
    "_exec": "exec",
    "_one": "one",
    "_one_as": "one",
    "_opt": "opt",
    "_opt_as": "opt",
    "_many": "many",
    "_many_as": "many",
    "_tuples": "many",
    "_plain": "many",
}
# The argument that holds the parameters, by helper (the typed helpers take a class first).
PARAMS_AT = {name: 3 if name.endswith("_as") or name == "_tuples" else 2 for name in HELPERS}


@dataclass(frozen=True)
class Call:
    where: str
    helper: str  # a helper's name, or "execute" for a sync connection's
    names: tuple[str, ...]  # the statement, or each it may be (name: Many = "a" if x else "b")
    params: frozenset[str] | None  # None: not read from the source


def _module_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _classes() -> dict[str, ast.ClassDef]:
    out: dict[str, ast.ClassDef] = {}
    for path in RECORD_MODULES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        out.update({n.name: n for n in tree.body if isinstance(n, ast.ClassDef)})
    return out


CLASSES = _classes()
SHARED = _module_functions(ast.parse((STORAGE / "statements.py").read_text(encoding="utf-8")))


class _Reader:
    """Reads the parameter names a call passes, within one function of one module."""

    def __init__(
        self, functions: dict[str, ast.FunctionDef], func: ast.AsyncFunctionDef | ast.FunctionDef
    ) -> None:
        self.functions = functions  # the module's own and statements.py's, by name
        self.func = func
        self.annotations = {
            a.arg: ast.unparse(a.annotation).split("|")[0].strip()
            for a in func.args.args + func.args.kwonlyargs
            if a.annotation is not None
        }

    def keys(self, node: ast.expr | None, before: int) -> frozenset[str] | None:
        if node is None or (isinstance(node, ast.Constant) and node.value is None):
            return frozenset()
        if isinstance(node, ast.Dict):
            return self._dict(node, before)
        if isinstance(node, ast.Name):
            return self._variable(node.id, before)
        if isinstance(node, ast.Call):
            return self._call(node, before)
        return None

    def _dict(self, node: ast.Dict, before: int) -> frozenset[str] | None:
        out: set[str] = set()
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                spread = self.keys(value, before)
                if spread is None:
                    return None
                out |= spread
            elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                out.add(key.value)
            else:
                return None
        return frozenset(out)

    def _variable(self, name: str, before: int) -> frozenset[str] | None:
        value: ast.expr | None = None
        added: set[str] = set()
        for node in ast.walk(self.func):
            if getattr(node, "lineno", before) >= before:
                continue
            if (
                isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [name]
            ) or (isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == name):
                value, added = node.value, set()
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == f"{name}.update":
                added |= {k.arg for k in node.keywords if k.arg is not None}
        base = self.keys(value, before) if value is not None else None
        return None if base is None else base | added

    def _call(self, node: ast.Call, before: int) -> frozenset[str] | None:
        func = node.func
        if isinstance(func, ast.Name) and func.id == "record_params":
            return self._fields(node.args[0])
        if isinstance(func, ast.Name) and func.id in self.functions:
            return self._returned(self.functions[func.id])
        if isinstance(func, ast.Attribute) and func.attr == "params":
            cls = CLASSES.get(self.annotations.get(ast.unparse(func.value), ""))
            methods = [m for m in (cls.body if cls else []) if isinstance(m, ast.FunctionDef)]
            found = [m for m in methods if m.name == "params"]
            return self._returned(found[0]) if found else None
        return None

    def _fields(self, arg: ast.expr) -> frozenset[str] | None:
        cls = CLASSES.get(self.annotations.get(ast.unparse(arg), ""))
        if cls is None:
            return None
        return frozenset(ast.unparse(n.target) for n in cls.body if isinstance(n, ast.AnnAssign))

    def _returned(self, func: ast.FunctionDef) -> frozenset[str] | None:
        returns = [n.value for n in ast.walk(func) if isinstance(n, ast.Return)]
        dicts = [r for r in returns if isinstance(r, ast.Dict)]
        if len(dicts) != 1:
            return None
        return _Reader(self.functions, func).keys(dicts[0], dicts[0].lineno + 10_000)


def _names(node: ast.expr, func: ast.AsyncFunctionDef | ast.FunctionDef) -> tuple[str, ...]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, ast.Name):
        for n in ast.walk(func):
            if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == node.id:
                if isinstance(n.value, ast.IfExp):
                    return _names(n.value.body, func) + _names(n.value.orelse, func)
                if n.value is not None:
                    return _names(n.value, func)
    return ()


def calls() -> Iterator[Call]:
    for path in sorted(STORAGE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = _module_functions(tree)
        for func in ast.walk(tree):
            if not isinstance(func, ast.AsyncFunctionDef | ast.FunctionDef):
                continue
            if func.name in HELPERS or func.name in {"_execute", "statement"}:
                continue
            reader = _Reader({**SHARED, **module}, func)
            for node in ast.walk(func):
                if isinstance(node, ast.Call):
                    yield from _call(path, func, reader, node)


def _call(
    path: Path, func: ast.AsyncFunctionDef | ast.FunctionDef, reader: _Reader, node: ast.Call
) -> Iterator[Call]:
    where = f"{path.name}:{node.lineno}"
    target = ast.unparse(node.func)
    helper = target.removeprefix("self.")
    if helper in HELPERS:
        params = node.args[PARAMS_AT[helper]] if len(node.args) > PARAMS_AT[helper] else None
        params = next((k.value for k in node.keywords if k.arg == "params"), params)
        keys = reader.keys(params, node.lineno)
        yield Call(where, helper, _names(node.args[1], func), keys)
    elif (
        target.endswith(".execute")
        and node.args
        and ast.unparse(node.args[0]).startswith("self.statement(")
    ):
        statement = node.args[0]
        assert isinstance(statement, ast.Call)
        params = node.args[1] if len(node.args) > 1 else None
        yield Call(
            where, "execute", _names(statement.args[0], func), reader.keys(params, node.lineno)
        )


ALL = list(calls())


def test_the_storage_modules_run_statements_through_the_helpers() -> None:
    assert len(ALL) >= len(statements()), "the source reader found too few calls"


@pytest.mark.parametrize("call", ALL, ids=lambda c: f"{c.where}:{'|'.join(c.names)}")
def test_each_call_uses_its_statements_cardinality_and_passes_every_parameter(call: Call) -> None:
    found = statements()
    assert call.names, f"{call.where}: the statement's name is not a literal one"
    for name in call.names:
        assert name in found, f"{call.where}: no statement {name!r} in sql/queries.sql"
        wanted = found[name].cardinality
        if call.helper != "execute":
            assert HELPERS[call.helper] == wanted, (
                f"{call.where}: {name} is :{wanted}, run with {call.helper}"
            )
        assert call.params is not None, (
            f"{call.where}: cannot read the parameters passed to {name}: pass a dict literal, "
            "a record's params(), record_params(record) or a function returning a dict literal"
        )
        missing = found[name].parameters - call.params
        assert not missing, f"{call.where}: {name} is not passed {sorted(missing)}"


def test_every_statement_is_called() -> None:
    called = {name for call in ALL for name in call.names}
    assert sorted(set(statements()) - called) == []


def test_a_name_line_without_a_cardinality_is_refused() -> None:
    with pytest.raises(ValueError, match="must be '-- name: NAME :KIND'"):
        read_statements("-- name: a :one\nSELECT 1\n\n-- name: b\nSELECT 2\n")
    with pytest.raises(ValueError, match="must be"):
        read_statements("-- name: a :rows\nSELECT 1\n")
    with pytest.raises(ValueError, match="named twice"):
        read_statements("-- name: a :one\nSELECT 1\n-- name: a :one\nSELECT 2\n")


def test_placeholders_are_read_as_psycopg_reads_them() -> None:
    (s,) = read_statements("-- name: a :one\nSELECT %(x)s, '100%%', %(y)s::int, %%(z)s\n").values()
    assert s.parameters == {"x", "y"}
