"""Filters, keyset cursors and SQL of ``GET /workflows`` and ``/workflows/summary``.

Purely computational, no side effects: parsing and validating query parameters into
``RunFilters`` (a bad one raises Invalid naming the parameter), keyset cursors (``shared.cursors``,
bound to this list, the tenant, the filters and the order), the SQL
text with its arguments, and ``matches`` — the same filters applied in memory to a change on the
live stream, so that the list and the stream always agree.

Sort order is "start time": ``coalesce(started_at, created_at, epoch)`` (a pending run sorts by
its creation), then ``id`` as the tie-breaker, newest first by default. Migration 0003 indexes
exactly these expressions; keep ``SORT_KEY`` and ``TEXT_KEY`` identical to it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from apiserver.paging import DEFAULT_LIMIT, parse_limit
from apiserver.scope import Scope
from shared import cursors
from shared.errors import Invalid
from shared.runs import RunPhase, RunSource
from shared.sql import contains_pattern

SORT_KEY: Final = "coalesce(started_at, created_at, '1970-01-01 00:00:00+00'::timestamptz)"
TEXT_KEY: Final = (
    "(name || ' ' || namespace || ' ' || coalesce(template, '') || ' ' || "
    "coalesce(pipeline_id, ''))"
)
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
LIST_NAME: Final = "workflows"  # what its cursors are bound to
MAX_VALUES: Final = 50
MAX_VALUE_LENGTH: Final = 253
MAX_TEXT_LENGTH: Final = 200
# Counting stops here: an exact total beyond it costs a scan of every matching row (docs/api.md).
COUNT_CAP: Final = 10_000
FAILED_PHASES: Final = (RunPhase.FAILED.value, RunPhase.ERROR.value)

Order = Literal["asc", "desc"]

# Query parameter -> RunFilters field, for the multi-valued exact-match filters.
LIST_FILTERS: Final[Mapping[str, str]] = {
    "cluster": "clusters",
    "region": "regions",
    "provider": "providers",
    "phase": "phases",
    "source": "sources",
    "template": "templates",
    "pipeline": "pipelines",
    "namespace": "namespaces",
}
# RunFilters field -> column.
_COLUMNS: Final[Mapping[str, str]] = {
    "clusters": "cluster_id",
    "regions": "region",
    "providers": "provider",
    "phases": "phase",
    "sources": "source",
    "templates": "template",
    "pipelines": "pipeline_id",
    "namespaces": "namespace",
}
TEXT_PARAM: Final = "q"
AFTER_PARAM: Final = "started_after"
BEFORE_PARAM: Final = "started_before"
FILTER_PARAMS: Final = frozenset({*LIST_FILTERS, TEXT_PARAM, AFTER_PARAM, BEFORE_PARAM})
PAGE_PARAMS: Final = frozenset({"limit", "cursor", "order"})

_PHASES = {phase.value.lower(): phase.value for phase in RunPhase}
_SOURCES = {source.value: source.value for source in RunSource}


@dataclass(frozen=True, slots=True)
class RunFilters:
    """What the caller narrowed the runs to; empty tuples and None mean "any"."""

    clusters: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    providers: tuple[str, ...] = ()
    phases: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    templates: tuple[str, ...] = ()
    pipelines: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    text: str | None = None
    started_after: datetime | None = None
    started_before: datetime | None = None

    def fingerprint(self, order: Order) -> str:
        """A short digest of the filters and order: a cursor only continues the same list."""
        canonical = json.dumps(
            [order, *[_canonical(getattr(self, f.name)) for f in fields(self)]],
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where the next page starts: after the row with this sort key and id."""

    sort_at: datetime
    id: int


@dataclass(frozen=True, slots=True)
class Page:
    limit: int = DEFAULT_LIMIT
    order: Order = "desc"
    after: Cursor | None = None


@dataclass(frozen=True, slots=True)
class Query:
    sql: str
    args: tuple[Any, ...] = field(default_factory=tuple)


def _canonical(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple):
        return sorted(value)
    return value


# --- parsing --------------------------------------------------------------------------------
def _bad(parameter: str, message: str, value: str | None = None) -> Invalid:
    details: dict[str, Any] = {"parameter": parameter}
    if value is not None:
        details["value"] = value[:MAX_VALUE_LENGTH]
    return Invalid(f"{parameter}: {message}", details=details)


def _printable(text: str) -> bool:
    return all(ch.isprintable() for ch in text)


def _values(parameter: str, raw: Sequence[str]) -> tuple[str, ...]:
    values: list[str] = []
    for item in raw:
        for part in item.split(","):
            value = part.strip()
            if not value:
                raise _bad(parameter, "empty value", item)
            if len(value) > MAX_VALUE_LENGTH or not _printable(value):
                raise _bad(parameter, "value too long or not printable", value)
            if value not in values:
                values.append(value)
    if len(values) > MAX_VALUES:
        raise _bad(parameter, f"at most {MAX_VALUES} values")
    if parameter == "phase":
        known = []
        for value in values:
            phase = _PHASES.get(value.lower())
            if phase is None:
                raise _bad(
                    parameter,
                    f"unknown phase; expected one of {', '.join(_PHASES.values())}",
                    value,
                )
            known.append(phase)
        return tuple(dict.fromkeys(known))
    if parameter == "source":
        for value in values:
            if value not in _SOURCES:
                raise _bad(
                    parameter, f"unknown source; expected one of {', '.join(_SOURCES)}", value
                )
    return tuple(values)


def parse_time(parameter: str, text: str) -> datetime:
    """An RFC 3339 instant with an offset (``Z`` or ``+02:00``) as aware UTC."""
    value = text.strip()
    candidate = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        parsed = datetime.fromisoformat(candidate)
    except ValueError:
        raise _bad(
            parameter, "expected an RFC 3339 time such as 2025-03-14T06:00:00Z", text
        ) from None
    if parsed.tzinfo is None or "T" not in value.upper():
        raise _bad(
            parameter, "expected a date and time with an offset, such as 2025-03-14T06:00:00Z", text
        )
    return parsed.astimezone(UTC)


def _single(parameter: str, raw: Sequence[str]) -> str:
    if len(raw) != 1:
        raise _bad(parameter, "may be given once")
    return raw[0]


def parse_filters(params: Mapping[str, Sequence[str]]) -> RunFilters:
    """The filters among ``params`` (other names are ignored here; ``apiserver.params``
    refuses names a route does not take)."""
    values: dict[str, Any] = {}
    for parameter, attribute in LIST_FILTERS.items():
        if parameter in params:
            values[attribute] = _values(parameter, params[parameter])
    if TEXT_PARAM in params:
        text = _single(TEXT_PARAM, params[TEXT_PARAM]).strip()
        if not text or len(text) > MAX_TEXT_LENGTH or not _printable(text):
            raise _bad(TEXT_PARAM, f"expected 1 to {MAX_TEXT_LENGTH} printable characters", text)
        values["text"] = text
    for parameter, attribute in ((AFTER_PARAM, "started_after"), (BEFORE_PARAM, "started_before")):
        if parameter in params:
            values[attribute] = parse_time(parameter, _single(parameter, params[parameter]))
    filters = RunFilters(**values)
    if (
        filters.started_after is not None
        and filters.started_before is not None
        and filters.started_after >= filters.started_before
    ):
        raise _bad(BEFORE_PARAM, f"must be later than {AFTER_PARAM}")
    return filters


def parse_page(
    params: Mapping[str, Sequence[str]],
    filters: RunFilters,
    *,
    codec: cursors.CursorCodec,
    tenant: str | None,
) -> Page:
    """limit, order and cursor; the cursor must come from the same list, tenant, filters and
    order, signed with ``codec``'s key."""
    limit = parse_limit(params.get("limit"))
    order: Order = "desc"
    if "order" in params:
        text = _single("order", params["order"]).strip().lower()
        if text not in ("asc", "desc"):
            raise _bad("order", "expected asc or desc", text)
        order = "asc" if text == "asc" else "desc"
    after = None
    if "cursor" in params:
        token = _single("cursor", params["cursor"])
        micros, run_id = codec.decode(
            token, bound_to=cursor_binding(filters, order, tenant=tenant), shape=(int, int)
        )
        try:
            sort_at = EPOCH + timedelta(microseconds=int(micros))
        except OverflowError:
            raise _bad("cursor", "malformed cursor") from None
        after = Cursor(sort_at=sort_at, id=int(run_id))
    return Page(limit=limit, order=order, after=after)


# --- cursors --------------------------------------------------------------------------------
def cursor_binding(filters: RunFilters, order: Order, *, tenant: str | None) -> str:
    """What a cursor of the run list is bound to: this list, the tenant, filters and order."""
    return cursors.binding(LIST_NAME, tenant=tenant, filters=filters.fingerprint(order))


def next_cursor(
    cursor: Cursor,
    filters: RunFilters,
    page: Page,
    *,
    codec: cursors.CursorCodec,
    tenant: str | None,
) -> str:
    """The opaque token for the page after ``cursor``, good only for the same list."""
    micros = (cursor.sort_at - EPOCH) // timedelta(microseconds=1)  # exact, no float
    return codec.encode(
        (micros, cursor.id), bound_to=cursor_binding(filters, page.order, tenant=tenant)
    )


# --- SQL --------------------------------------------------------------------------------------
class _Builder:
    def __init__(self) -> None:
        self.args: list[Any] = []

    def param(self, value: Any) -> str:
        self.args.append(value)
        return f"${len(self.args)}"


def _scope_condition(scope: Scope, sql: _Builder) -> str | None:
    if scope.tenant is None:
        return None
    parts = [f"tenant = {sql.param(scope.tenant)}"]
    # Explicit pairs (not a subquery) so the planner can OR index scans together.
    for cluster_id, namespace in sorted(scope.grants):
        parts.append(
            f"(cluster_id = {sql.param(cluster_id)} AND namespace = {sql.param(namespace)})"
        )
    return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"


def _conditions(filters: RunFilters, scope: Scope, sql: _Builder) -> list[str]:
    conditions: list[str] = []
    scoped = _scope_condition(scope, sql)
    if scoped:
        conditions.append(scoped)
    for attribute, column in _COLUMNS.items():
        values: tuple[str, ...] = getattr(filters, attribute)
        if len(values) == 1:
            conditions.append(f"{column} = {sql.param(values[0])}")
        elif values:
            conditions.append(f"{column} = ANY({sql.param(list(values))}::text[])")
    if filters.text is not None:
        conditions.append(f"{TEXT_KEY} ILIKE {sql.param(contains_pattern(filters.text))}")
    if filters.started_after is not None:
        conditions.append(f"{SORT_KEY} >= {sql.param(filters.started_after)}")
    if filters.started_before is not None:
        conditions.append(f"{SORT_KEY} < {sql.param(filters.started_before)}")
    return conditions


def _where(conditions: list[str]) -> str:
    return ("WHERE " + " AND ".join(conditions)) if conditions else ""


LIST_COLUMNS: Final = (
    "id, cluster_id, namespace, name, uid, region, provider, tenant, source, phase, message, "
    "progress_done, progress_total, created_at, started_at, finished_at, duration_seconds, "
    "estimated_duration_seconds, parameters, resources_duration, template, pipeline_id, "
    "pipeline_version, cron_workflow, node_count, graph_truncated, deleted_at, updated_at, "
    f"{SORT_KEY} AS sort_at"
)
DETAIL_COLUMNS: Final = f"{LIST_COLUMNS}, labels, graph"


def list_query(filters: RunFilters, scope: Scope, page: Page) -> Query:
    """One page of runs (``limit + 1`` rows: the extra one says whether a next page exists)."""
    sql = _Builder()
    conditions = _conditions(filters, scope, sql)
    if page.after is not None:
        op = "<" if page.order == "desc" else ">"
        conditions.append(
            f"({SORT_KEY}, id) {op} ({sql.param(page.after.sort_at)}, {sql.param(page.after.id)})"
        )
    direction = "DESC" if page.order == "desc" else "ASC"
    text = (
        f"SELECT {LIST_COLUMNS} FROM runs {_where(conditions)} "
        f"ORDER BY {SORT_KEY} {direction}, id {direction} LIMIT {sql.param(page.limit + 1)}"
    )
    return Query(text, tuple(sql.args))


def count_query(filters: RunFilters, scope: Scope, *, cap: int = COUNT_CAP) -> Query:
    """How many runs match, counting at most ``cap + 1`` (more means "at least cap")."""
    sql = _Builder()
    where = _where(_conditions(filters, scope, sql))
    text = f"SELECT count(*) FROM (SELECT 1 FROM runs {where} LIMIT {sql.param(cap + 1)}) AS capped"
    return Query(text, tuple(sql.args))


def summary_query(filters: RunFilters, scope: Scope, *, since: datetime) -> Query:
    """Counts by phase, and failures that finished at or after ``since``, per phase."""
    sql = _Builder()
    where = _where(_conditions(filters, scope, sql))
    failed = sql.param(list(FAILED_PHASES))
    since_param = sql.param(since)
    text = (
        "SELECT phase, count(*) AS runs, count(*) FILTER ("
        f"WHERE phase = ANY({failed}::text[]) AND finished_at >= {since_param}) AS failures "
        f"FROM runs {where} GROUP BY phase"
    )
    return Query(text, tuple(sql.args))


def detail_query(scope: Scope, *, cluster_id: str, namespace: str, name: str) -> Query:
    """The run with this name: the live one, else the most recent of that name."""
    sql = _Builder()
    conditions = [
        f"cluster_id = {sql.param(cluster_id)}",
        f"namespace = {sql.param(namespace)}",
        f"name = {sql.param(name)}",
    ]
    scoped = _scope_condition(scope, sql)
    if scoped:
        conditions.append(scoped)
    text = (
        f"SELECT {DETAIL_COLUMNS} FROM runs {_where(conditions)} "
        f"ORDER BY deleted_at IS NULL DESC, {SORT_KEY} DESC, id DESC LIMIT 1"
    )
    return Query(text, tuple(sql.args))


# --- the same filters in memory (the live stream) --------------------------------------------
def matches(filters: RunFilters, scope: Scope, row: Mapping[str, Any]) -> bool:
    """Whether a run (a mapping with the list columns) is in ``scope`` and passes ``filters``,
    exactly as the SQL of ``list_query`` would decide. Purely computational."""
    if not scope.allows(
        tenant=row.get("tenant"),
        cluster_id=row.get("cluster_id", ""),
        namespace=row.get("namespace", ""),
    ):
        return False
    for attribute, column in _COLUMNS.items():
        values: tuple[str, ...] = getattr(filters, attribute)
        if values and row.get(column) not in values:
            return False
    if filters.text is not None:
        haystack = " ".join(
            (
                str(row.get("name") or ""),
                str(row.get("namespace") or ""),
                str(row.get("template") or ""),
                str(row.get("pipeline_id") or ""),
            )
        )
        if filters.text.lower() not in haystack.lower():
            return False
    sort_at = row.get("sort_at")
    if filters.started_after is not None and (
        not isinstance(sort_at, datetime) or sort_at < filters.started_after
    ):
        return False
    return not (
        filters.started_before is not None
        and (not isinstance(sort_at, datetime) or sort_at >= filters.started_before)
    )


# --- rows as JSON ----------------------------------------------------------------------------
def iso(value: datetime | None) -> str | None:
    """RFC 3339 in UTC with ``Z``."""
    if value is None:
        return None
    text = value.astimezone(UTC).isoformat()
    return text.replace("+00:00", "Z")


def run_item(row: Mapping[str, Any]) -> dict[str, Any]:
    """A run as the list, the detail and the stream show it."""
    done, total = row.get("progress_done"), row.get("progress_total")
    return {
        "id": row["id"],
        "cluster": {
            "id": row["cluster_id"],
            "region": row.get("region"),
            "provider": row.get("provider"),
        },
        "namespace": row["namespace"],
        "name": row["name"],
        "uid": row["uid"],
        "tenant": row.get("tenant"),
        "source": row["source"],
        "phase": row["phase"],
        "message": row.get("message"),
        "progress": None if done is None or total is None else {"done": done, "total": total},
        "created_at": iso(row.get("created_at")),
        "started_at": iso(row.get("started_at")),
        "finished_at": iso(row.get("finished_at")),
        "duration_seconds": row.get("duration_seconds"),
        "estimated_duration_seconds": row.get("estimated_duration_seconds"),
        "parameters": row.get("parameters") or {},
        "resources_duration": row.get("resources_duration") or {},
        "template": row.get("template"),
        "pipeline": (
            None
            if row.get("pipeline_id") is None
            else {"id": row["pipeline_id"], "version": row.get("pipeline_version")}
        ),
        "cron_workflow": row.get("cron_workflow"),
        "node_count": row.get("node_count", 0),
        "graph_truncated": bool(row.get("graph_truncated")),
        "deleted": row.get("deleted_at") is not None,
        "deleted_at": iso(row.get("deleted_at")),
        "updated_at": iso(row.get("updated_at")),
    }
