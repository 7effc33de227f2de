"""Where the store's statements run: one transaction body, written once with SQLAlchemy Core,
runs through `Executor` on an engine connection (`EngineExecutor`) or on the owned SQLite
writer's `sqlite3` connection (`SqliteExecutor`, each statement compiled once)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection, Executable
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.sql.compiler import SQLCompiler

T = TypeVar("T")
Params = Mapping[str, Any]
_NONE: Params = {}


class Executor(Protocol):
    """One open transaction: the statements of a body run here, in order, on its thread."""

    def execute(self, stmt: Executable, params: Params = _NONE) -> int:
        """Run ``stmt``; how many rows it changed."""

    def executemany(self, stmt: Executable, rows: Sequence[Params]) -> None: ...

    def fetch(self, stmt: Executable, params: Params = _NONE) -> list[tuple[Any, ...]]:
        """The rows a query (or a statement with RETURNING) answers, as plain tuples."""

    def insert(self, stmt: Executable, params: Params) -> int:
        """Insert one row; its new integer primary key."""


Body = Callable[[Executor], T]


class EngineExecutor:
    """`Executor` on a SQLAlchemy connection: an async engine's, reached with `run_sync`."""

    __slots__ = ("conn",)

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def execute(self, stmt: Executable, params: Params = _NONE) -> int:
        return int(self.conn.execute(stmt, params).rowcount)

    def executemany(self, stmt: Executable, rows: Sequence[Params]) -> None:
        self.conn.execute(stmt, list(rows))

    def fetch(self, stmt: Executable, params: Params = _NONE) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self.conn.execute(stmt, params)]

    def insert(self, stmt: Executable, params: Params) -> int:
        key = self.conn.execute(stmt, params).inserted_primary_key
        assert key is not None
        return int(key[0])


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A statement as sqlite3 runs it: named placeholders, the values compiled into it (its
    literals, scalar column defaults), the type conversions of its parameters (floats) and
    its expanding parameters (``IN`` lists), each item with a placeholder of its own."""

    sql: str
    fixed: dict[str, Any]
    convert: tuple[tuple[str, Callable[[Any], Any]], ...]
    spread: tuple[tuple[str, tuple[str, ...]], ...]  # (name, its items' names)
    direct: bool  # the parameters go to sqlite3 as they are

    def args(self, params: Params) -> Params:
        if self.direct:
            return params
        args = {**self.fixed, **params}
        for name, convert in self.convert:
            args[name] = convert(args[name])
        for name, names in self.spread:
            args.update(zip(names, args.pop(name), strict=True))
        return args


@dataclass(frozen=True, slots=True)
class _ByLength:
    """The compilations of one statement with ``IN`` lists, by the lengths of those lists."""

    lists: tuple[str, ...]  # the parameters given as lists
    compiled: dict[tuple[int, ...], _Compiled]


class SqliteExecutor:
    """`Executor` on a `sqlite3` connection. A statement is compiled the first time it runs with
    a given shape (parameter names, lengths of its ``IN`` lists) and reused after: the
    per-message cost is sqlite3's alone, with no SQLAlchemy execution machinery in between."""

    __slots__ = ("_cache", "conn")

    _dialect = sqlite_dialect.dialect(paramstyle="named")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        # by statement object (module constants and cached builders), then parameter names
        self._cache: dict[Executable, dict[tuple[str, ...], _Compiled | _ByLength]] = {}

    def execute(self, stmt: Executable, params: Params = _NONE) -> int:
        compiled = self._compiled(stmt, params)
        return self.conn.execute(compiled.sql, compiled.args(params)).rowcount

    def executemany(self, stmt: Executable, rows: Sequence[Params]) -> None:
        if rows:
            compiled = self._compiled(stmt, rows[0])
            self.conn.executemany(compiled.sql, [compiled.args(r) for r in rows])

    def fetch(self, stmt: Executable, params: Params = _NONE) -> list[tuple[Any, ...]]:
        compiled = self._compiled(stmt, params)
        return self.conn.execute(compiled.sql, compiled.args(params)).fetchall()

    def insert(self, stmt: Executable, params: Params) -> int:
        compiled = self._compiled(stmt, params)
        rowid = self.conn.execute(compiled.sql, compiled.args(params)).lastrowid
        assert rowid is not None
        return rowid

    def prepare(self, statements: Sequence[tuple[Executable, Params]]) -> None:
        """Compile each statement for parameters shaped like the ones given, ahead of use."""
        for stmt, params in statements:
            self._compiled(stmt, params)

    def _compiled(self, stmt: Executable, params: Params) -> _Compiled:
        by_names = self._cache.get(stmt)
        if by_names is None:
            if len(self._cache) >= _CACHED:  # statements built per call: start afresh
                self._cache.clear()
            by_names = self._cache[stmt] = {}
        names = tuple(params)
        found = by_names.get(names)
        if type(found) is _Compiled:
            return found
        if not isinstance(found, _ByLength):
            found = _ByLength(_lists(params), {})
        lengths = tuple([len(params[n]) for n in found.lists])
        compiled = found.compiled.get(lengths)
        if compiled is None:
            compiled = compile_for_sqlite(stmt, params, self._dialect)
            # with no IN list given, one compilation serves every call
            by_names[names] = compiled if not found.lists else found
            found.compiled[lengths] = compiled
        return compiled


_CACHED = 1024  # statements: far more than the store's own


def _lists(params: Params) -> tuple[str, ...]:
    return tuple(k for k, v in params.items() if type(v) is list)


def compile_for_sqlite(stmt: Executable, params: Params, dialect: Any) -> _Compiled:
    """``stmt`` compiled once for sqlite3's named placeholders, for parameters like ``params``."""
    compiled = stmt.compile(dialect=dialect, column_keys=list(params))  # type: ignore[attr-defined]
    assert isinstance(compiled, SQLCompiler)
    expanded = compiled.construct_expanded_state(dict(params))
    expanding = tuple(expanded.parameter_expansion)
    fixed = {k: v for k, v in compiled.construct_params(dict(params)).items() if k not in params}
    defaults = [(c, c.default) for c in compiled.insert_prefetch]
    defaults += [(c, c.onupdate) for c in compiled.update_prefetch]
    for column, default in defaults:
        if default is None or not default.is_scalar:
            raise NotImplementedError(f"{column.key}: only a scalar default can be compiled in")
        fixed[column.key] = default.arg  # type: ignore[attr-defined]
    convert = []
    for bind, name in compiled.bind_names.items():
        if (process := bind.type.bind_processor(dialect)) is not None:
            if name in expanding:
                raise NotImplementedError(f"{name}: an IN list whose items need converting")
            convert.append((name, process))  # SQLAlchemy's pass None through
    for column in getattr(stmt, "exported_columns", ()):
        if column.type.result_processor(dialect, None) is not None:
            raise NotImplementedError(f"{column.key}: a result that needs converting")
    spread = tuple((n, tuple(names)) for n, names in expanded.parameter_expansion.items())
    direct = not fixed and not convert and not spread
    return _Compiled(expanded.statement, fixed, tuple(convert), spread, direct)
