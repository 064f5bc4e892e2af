"""The cuts table's queries, answered on the server: a filter typed by the user, a sort, a page.

A filter is clauses joined by `and` (or `&`), each `<column> <op> <value>`: op one of < <= > >= = ==
!= (numbers or text) or ~ (the text contains the value, any case); a value with spaces is quoted
("a b" or 'a b'); `null` matches a missing value (`asr_text = null`). It is parsed, never evaluated:
the column must be one of the table's and the value a number where the column holds numbers. It is
read in one pass (each character looked at a bounded number of times), and at most MAX_FILTER
characters long.

Example::

    rows = page(table, where("dnsmos_bak < 3.0 and split = train", table.schema), sort="duration")
"""

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sharflow.core.errors import SharflowError

PAGE_SIZE = 50
MAX_FILTER = 2000  # characters: a filter of 50 clauses
ORDER = "_order"  # the row's place in the table: ties in a sort keep it, so a page is always the same
# each matched at a position and consumed: no pattern is tried twice over the same characters
_SPACE = re.compile(r"\s*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OP = re.compile(r"<=|>=|==|!=|=|<|>|~")
_BARE = re.compile(r"[^\s&]+")
_AND = re.compile(r"and(?=\s)", re.IGNORECASE)
_COMPARE = {
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
    "=": pc.equal,
    "==": pc.equal,
    "!=": pc.not_equal,
}


class QueryError(SharflowError):
    """A filter or sort the table cannot answer; the message says what to type instead."""


@dataclass(frozen=True)
class Page:
    """One page of the rows a query kept: `rows` (dicts), how many it kept and their hours."""

    rows: list[dict]
    total: int
    hours: float
    number: int
    size: int


def where(text: str, schema: pa.Schema) -> pc.Expression | None:
    """The filter `text` (module docstring) as an expression over a table of `schema`; None for none."""
    expression = None
    for clause in clauses(text or ""):
        term = _term(*clause, schema)
        expression = term if expression is None else expression & term
    return expression


def clauses(text: str) -> list[tuple[str, str, str]]:
    """(column, op, value as typed) of each clause of the filter `text`, read left to right once."""
    if len(text) > MAX_FILTER:
        raise QueryError(f"a filter is at most {MAX_FILTER} characters; this one has {len(text)}")
    out, end = [], len(text)
    at = _SPACE.match(text).end()
    while at < end:
        start = at
        name = _NAME.match(text, at)
        op = name and _OP.match(text, _SPACE.match(text, name.end()).end())
        if not op:
            raise _unreadable(text, start)
        at = _SPACE.match(text, op.end()).end()
        if text[at : at + 1] in ("'", '"'):
            close = text.find(text[at], at + 1)
            if close < 0:
                raise QueryError(f"cannot read '{_shown_part(text, start)}': a quote is not closed")
            value, at = text[at : close + 1], close + 1
        else:
            bare = _BARE.match(text, at)
            if not bare:
                raise _unreadable(text, start)
            value, at = bare.group(), bare.end()
        out.append((name.group(), op.group(), value))
        at = _SPACE.match(text, at).end()
        if at < end:
            joined = _AND.match(text, at)
            if text[at] != "&" and not joined:
                raise _unreadable(text, start)
            at = _SPACE.match(text, at + 1 if text[at] == "&" else joined.end()).end()
            if at == end:
                raise _unreadable(text, start)
    return out


def _shown_part(text: str, start: int) -> str:
    part = text[start : start + 60].strip()
    return part + ("..." if len(text) > start + 60 else "")


def _unreadable(text: str, start: int) -> QueryError:
    return QueryError(
        f"cannot read '{_shown_part(text, start)}': write <column> <op> <value>, e.g. dnsmos_bak < 3.0 "
        "(op: < <= > >= = != ~), clauses joined by 'and'"
    )


def _term(column: str, op: str, raw: str, schema: pa.Schema) -> pc.Expression:
    if column not in schema.names or column == ORDER:
        shown = ", ".join(n for n in schema.names if n != ORDER)
        raise QueryError(f"no column '{column}'; the columns are: {shown}")
    field = pc.field(column)
    value = raw[1:-1] if raw[:1] in "\"'" and len(raw) > 1 else raw
    if value.lower() == "null" and raw == value:
        if op not in ("=", "==", "!="):
            raise QueryError(f"'{column} {op} null': only = null and != null ask for missing values")
        missing = field.is_null()
        return ~missing if op == "!=" else missing
    kind = schema.field(column).type
    kind = kind.value_type if pa.types.is_dictionary(kind) else kind
    if op == "~":
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise QueryError(f"'{column} ~ ...' asks for text; {column} holds {kind}: use < > = instead")
        return pc.match_substring(field.cast(pa.string()), value, ignore_case=True)
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        try:
            number = float(value)
        except ValueError:
            raise QueryError(f"'{column}' holds numbers; '{value}' is not one") from None
        # a float32 column is compared in float32: its 4.4 is the 4.4 typed, not 4.4000001 > 4.4
        return _COMPARE[op](field, pa.scalar(number, pa.float32() if pa.types.is_float32(kind) else None))
    if pa.types.is_boolean(kind):
        if value.lower() not in ("true", "false"):
            raise QueryError(f"'{column}' is true or false; '{value}' is neither")
        return _COMPARE[op](field, pa.scalar(value.lower() == "true"))
    return _COMPARE[op](field.cast(pa.string()), pa.scalar(value))


def page(
    table: pa.Table,
    expression: pc.Expression | None = None,
    *,
    sort: str | None = None,
    descending: bool = False,
    number: int = 0,
    size: int = PAGE_SIZE,
) -> Page:
    """Page `number` (from 0) of `size` rows of `table` kept by `expression`, sorted by `sort` (nulls
    last; ties in the table's order). The table has an ORDER column (add_order); rows carry it."""
    if sort is not None and (sort not in table.schema.names or sort == ORDER):
        raise QueryError(f"cannot sort by '{sort}': not a column")
    kept = table if expression is None else table.filter(expression)
    total = kept.num_rows
    hours = float(pc.sum(kept["duration"]).as_py() or 0.0) / 3600 if "duration" in kept.schema.names else 0.0
    start = max(number, 0) * size
    if sort is None:
        rows = kept.slice(start, size)
    else:
        key = kept[sort]
        if pa.types.is_dictionary(key.type):
            key = key.cast(pa.string())
        order = "descending" if descending else "ascending"
        keys = pa.table({"k": key, "o": kept[ORDER]})
        indices = pc.sort_indices(keys, sort_keys=[("k", order, "at_end"), ("o", "ascending", "at_end")])
        rows = kept.take(indices.slice(start, size))
    return Page(_shown(rows), total, hours, max(number, 0), size)


def _shown(rows: pa.Table) -> list[dict]:
    """The rows as dicts, a float32 value as its shortest decimal (3.9300 not 3.930000066757202)."""
    out = rows.to_pylist()
    for column in rows.schema:
        if pa.types.is_float32(column.type):
            for row in out:
                if row[column.name] is not None:
                    row[column.name] = float(str(np.float32(row[column.name])))
    return out


def add_order(table: pa.Table) -> pa.Table:
    """`table` with its ORDER column (0, 1, ...), which page() needs."""
    return table.append_column(ORDER, pa.array(range(table.num_rows), pa.int64()))
