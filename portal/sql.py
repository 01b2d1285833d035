"""Small tools for the few statements written by hand on the hot paths (a submit, a token's use): Django's own
INSERT put inside a larger statement, and related rows read by another query handed to an object; statements
PostgreSQL prepares once; timestamps read by psycopg's compiled loader (`connect`)."""

from __future__ import annotations

import functools
import re
import time
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, models, router
from django.db.backends.postgresql.base import TIMESTAMPTZ_OID  # type: ignore[attr-defined]
from django.db.backends.postgresql.psycopg_any import register_tzloader  # type: ignore[import-untyped]
from django.db.backends.signals import connection_created
from django.db.models import Case, F, QuerySet, Value, When
from django.db.models.base import ModelState
from django.db.models.expressions import RawSQL
from django.db.models.query import ValuesListIterable, get_related_populators  # type: ignore[attr-defined]
from psycopg import ClientCursor, RawCursor, abc
from psycopg import adapters as psycopg_adapters
from psycopg.adapt import Loader
from psycopg.pq import Format
from psycopg.types.array import ListBinaryDumper
from psycopg.types.datetime import TimestamptzLoader


def insert_sql(obj: models.Model, ignore_conflicts: bool = False) -> tuple[str, list[Any]]:
    """The INSERT of one object (every concrete field but an auto-increment key), as SQL and parameters, to be
    put inside a larger statement (`WITH w AS (<insert> RETURNING ...) ...`): the statement Django's own INSERT
    is (tests/workloads/test_compiled_statements.py holds them equal), written once per model from the model's
    fields, with each value prepared through the field's public API (pre_save, get_db_prep_save) as Django's
    INSERT prepares it, except a plain value of a plain field (see _direct), which passes straight."""
    model = type(obj)
    key = (connection.alias, model, ignore_conflicts)
    found = _INSERTS.get(key)
    if found is None:
        fields = [f for f in model._meta.concrete_fields if not _is_auto(f) and not f.generated]
        qn = connection.ops.quote_name
        statement = (
            f"INSERT INTO {qn(model._meta.db_table)} ({', '.join(qn(f.column) for f in fields)}) "  # noqa: S608 (our names)
            f"VALUES ({', '.join(['%s'] * len(fields))})" + (" ON CONFLICT DO NOTHING" if ignore_conflicts else "")
        )
        found = _INSERTS[key] = (statement, fields, [_direct(f) for f in fields])
    statement, fields, direct = found
    params = []
    for field, way in zip(fields, direct, strict=True):
        if way is not None and type(value := getattr(obj, field.attname)) in way[0]:
            params.append(way[1](value))
            continue
        value = field.pre_save(obj, True)
        if hasattr(value, "resolve_expression"):
            raise TypeError(f"sql.insert_sql takes values, not expressions ({model.__name__}.{field.name})")
        params.append(field.get_db_prep_save(value, connection=connection))
    return statement, params


def _is_auto(field: Any) -> bool:
    """An auto-increment key, which an INSERT leaves to the database."""
    return isinstance(field, (models.AutoField, models.BigAutoField, models.SmallAutoField))


_INSERTS: dict[tuple[str, type[models.Model], bool], tuple[str, list[Any], list[Any]]] = {}

# Fields whose preparation of a value of a plain type, or of None, is known and cheap: text passes as it is,
# a truth value as it is, a whole number as the database backend wraps it (psycopg's Int4 on PostgreSQL), a
# key to a row with an integer key as it is, a UUID as it is where the database has the type (PostgreSQL), and
# None as it is for a time or a key. Django's own preparation (pre_save, get_db_prep_save and the calls below
# them) gives the same for these, at a microsecond or two a field, and a workload has fifty. Anything else
# (a subclass, a time given, JSON, a value of another type) goes through the field itself.
_TEXT_FIELDS = (models.CharField, models.TextField, models.SlugField, models.URLField, models.EmailField)
_INTEGER_FIELDS = (
    models.IntegerField, models.SmallIntegerField, models.BigIntegerField,
    models.PositiveIntegerField, models.PositiveSmallIntegerField, models.PositiveBigIntegerField,
)  # fmt: skip
_NONE = type(None)


def _direct(field: Any) -> tuple[tuple[type, ...], Callable[[Any], Any]] | None:
    """(the value types passed straight, how) for a field whose values of those types need none of its own
    methods, or None."""
    kind = type(field)
    if kind is models.ForeignKey:
        target = field.target_field
        if _is_auto(target):
            return (int, _NONE), _same
        if type(target) is models.UUIDField and connection.features.has_native_uuid_field:
            return (uuid.UUID, _NONE), _same
        return (_NONE,), _same
    if kind in _TEXT_FIELDS:
        return (str, _NONE), _same
    if kind is models.BooleanField:
        return (bool, _NONE), _same
    if kind in _INTEGER_FIELDS:
        adapt, internal = connection.ops.adapt_integerfield_value, field.get_internal_type()
        return (int, _NONE), lambda value: adapt(value, internal)
    if kind is models.UUIDField and connection.features.has_native_uuid_field:
        return (uuid.UUID, _NONE), _same
    if kind is models.DateTimeField and not (field.auto_now or field.auto_now_add):  # those set it in pre_save
        return (_NONE,), _same
    return None


def _same(value: Any) -> Any:
    return value


M = TypeVar("M", bound=models.Model)


def unsaved(model: type[M], **values: Any) -> M:
    """`model(**values)`, made as Model.__init__ makes it, from a plan worked out once per model: each concrete
    field not given takes its default (a callable one called for each object, a constant one shared, as Django
    shares it), and a foreign key given by name takes the object (None, or one with its key: that key, and the
    object kept as the related object; an array's parent, recorded with its elements, has its key already).
    Model.__init__ works all of that out field by field on every call (a workload has fifty fields;
    bench.profile_submit shows the difference). Values are given by field name (a key's name or its attname);
    nothing else (a property, say) is taken. No pre_init or post_init signal is sent: use it only for models
    nothing listens to those for (tests/workloads/test_unsaved.py checks the ones it is used for)."""
    plan = _UNSAVED.get(model) or _unsaved_plan(model)
    constants, calls, keys, attnames = plan
    obj = model.__new__(model)
    obj._state = ModelState()
    own = obj.__dict__
    own.update(constants)
    for attname, default in calls:
        own[attname] = default()
    for name, value in values.items():
        if (key := keys.get(name)) is not None:
            if value is not None:
                if obj._state.db is None:  # as the key's descriptor does: the database the object is for
                    obj._state.db = router.db_for_write(model, instance=value)
                own[key.attname] = getattr(value, key.target_field.attname)
            else:
                own[key.attname] = None
            key.set_cached_value(obj, value)
        elif name in attnames:
            own[name] = value
        else:
            raise TypeError(f"{model.__name__} has no field {name!r}")
    return obj


def _unsaved_plan(model: type[models.Model]) -> Any:
    constants: dict[str, Any] = {}
    calls: list[tuple[str, Callable[[], Any]]] = []
    keys: dict[str, Any] = {}
    for field in model._meta.concrete_fields:
        if field.is_relation and field.many_to_one:
            keys[field.name] = field
        if field.has_default() and callable(field.default):
            calls.append((field.attname, field.get_default))
        else:
            constants[field.attname] = field.get_default()
    plan = _UNSAVED[model] = (constants, calls, keys, frozenset(constants) | {a for a, _ in calls})
    return plan


_UNSAVED: dict[type[models.Model], Any] = {}


def insert_select_sql(obj: models.Model, source: str, ignore_conflicts: bool = False) -> tuple[str, list[Any]]:
    """The INSERT of insert_sql as `INSERT ... SELECT <values> FROM <source>`: a row only for each row of
    `source` (say, none when the insert it depends on did nothing). `source` may go on with a WHERE clause;
    its parameters follow the values'."""
    sql, params = insert_sql(obj, ignore_conflicts)
    head, values = sql.split(" VALUES (", 1)
    values, _, tail = values.rpartition(")")  # tail: "" or " ON CONFLICT DO NOTHING"
    return f"{head} SELECT {values} FROM {source}{tail}", params  # noqa: S608 (Django-compiled SQL; values are parameters)


def copy_insert(objs: Sequence[models.Model]) -> None:
    """Insert objects of one model with one COPY (PostgreSQL): the fastest road in for a bulk submit's rows,
    with no statement to build and no parameter per value. Sets each one as saved, as bulk_create does. A
    violated constraint raises IntegrityError, as an INSERT would. Auto-increment keys are left unset."""
    model = type(objs[0])
    fields = [f for f in model._meta.concrete_fields if not _is_auto(f) and not f.generated]
    # Values go as they are (psycopg adapts each type) except those a field must prepare (JSON).
    prepared = [isinstance(f, models.JSONField) for f in fields]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    statement = f"COPY {connection.ops.quote_name(model._meta.db_table)} ({columns}) FROM STDIN"
    started = time.monotonic()
    with connection.cursor() as cursor, connection.wrap_database_errors, cursor.cursor.copy(statement) as copy:
        for obj in objs:
            copy.write_row([
                f.get_db_prep_save(getattr(obj, f.attname), connection) if prep else getattr(obj, f.attname)
                for f, prep in zip(fields, prepared, strict=True)
            ])  # fmt: skip
    if connection.queries_logged:  # counted and shown like any other statement (tests pin statement counts)
        connection.queries_log.append(
            {"sql": f"{statement} ({len(objs)} rows)", "time": f"{time.monotonic() - started:.3f}"}
        )
    for obj in objs:
        obj._state.adding, obj._state.db = False, connection.alias


def among(field: models.Field[Any, Any], values: Sequence[Any]) -> Any:
    """What `<field>__in=` takes for a long list (a fabric's thousands of waiting jobs): on PostgreSQL the list
    as one array, unnested by a subquery, which is sent and parsed as one value, not as one constant each (a
    sync's poll sends thousands; bench.bench_slurm guards it); elsewhere the list itself."""
    if connection.vendor != "postgresql":
        return list(values)
    return RawSQL(f"SELECT unnest(%s::{field.db_type(connection)}[])", (list(values),))  # noqa: S611 (our column's type; the values are a parameter)


def set_each(model: type[models.Model], name: str, by_pk: Mapping[Any, Any], *, blank_only: bool = False) -> int:
    """Set one text column of many rows, each to its own value (`by_pk`: primary key -> value); returns how many
    rows changed. `blank_only`: only rows where it is still '' (a second writer never overwrites the first).

    On PostgreSQL one statement whatever the number of rows, always the same (prepared once): the keys and the
    values go as two arrays, unnested into a join. Elsewhere Django's UPDATE with a CASE per row."""
    if not by_pk:
        return 0
    if connection.vendor != "postgresql":
        return _set_each_by_case(model, name, by_pk, blank_only=blank_only)
    column, _ = field_of(model, name)
    meta = model._meta
    table, key = connection.ops.quote_name(meta.db_table), connection.ops.quote_name(meta.pk.column)
    # The values as text: assigned to the column, a value too long for it is refused, as an UPDATE of it would
    # be (a cast to the column's varchar(n) would cut it short without a word).
    statement = (
        f"UPDATE {table} AS t SET {column} = v.value "  # noqa: S608 (our table and columns; values are parameters)
        f"FROM unnest(%s::{meta.pk.db_type(connection)}[], %s::text[]) AS v(key, value) "
        f"WHERE t.{key} = v.key" + (f" AND t.{column} = ''" if blank_only else "")
    )
    with prepared(binary_lists=True) as cursor:
        cursor.execute(statement, [[str(pk) for pk in by_pk], list(by_pk.values())])
        return int(cursor.rowcount)


def _set_each_by_case(model: type[models.Model], name: str, by_pk: Mapping[Any, Any], *, blank_only: bool) -> int:
    """set_each as Django's UPDATE with a CASE per row (any database)."""
    _, field = field_of(model, name)
    rows = model._default_manager.filter(pk__in=list(by_pk), **({name: ""} if blank_only else {}))
    whens = [When(pk=pk, then=Value(value, output_field=field)) for pk, value in by_pk.items()]
    return rows.update(**{name: Case(*whens, default=F(name), output_field=field)})


class Compiled:
    """A query built and compiled by the ORM once per shape, then run again with other values in its parameters,
    giving model instances as the queryset would (its select_related objects and annotations included): a
    query with joins or a dozen subqueries costs more to build than to run.

    `run(shape, build, *values)` calls `build(*stand_ins)` the first time it meets `shape`, with a stand-in
    for each value that no real value equals (of its type: an id, a time or a text far outside any real one),
    and keeps its SQL and parameters; each run puts `values` where the stand-ins were. `shape` must name
    everything that decides the query's structure (which columns `build` annotates, how many values, say):
    two different queries under one shape would run the first."""

    MAX_SHAPES = 256

    def __init__(self, model: type[models.Model]) -> None:
        self.model = model
        self.cache: dict[Hashable, _Statement] = {}

    def run(self, shape: Hashable, build: Callable[..., QuerySet[Any]], *values: Any) -> list[Any]:
        stand_ins = tuple(_stand_in(value, i) for i, value in enumerate(values))
        key = (connection.alias, shape)
        found = self.cache.get(key)
        if found is None:
            if len(self.cache) >= self.MAX_SHAPES:
                self.cache.clear()
            found = self.cache[key] = _Statement(build(*stand_ins))
        by_stand_in = dict(zip(stand_ins, values, strict=True))
        for stand_in, value in zip(stand_ins, values, strict=True):
            if isinstance(stand_in, datetime):  # as the database takes it: on SQLite, a text
                adapt = connection.ops.adapt_datetimefield_value
                by_stand_in[adapt(stand_in)] = adapt(value)
        return found.objects([_put(p, by_stand_in) for p in found.params])


class _Statement:
    """One compiled query of model instances and what it takes to make them from its rows: what Django's
    ModelIterable works out on every run, worked out once (the query must not use prefetch_related)."""

    def __init__(self, queryset: QuerySet[Any]) -> None:
        if queryset._prefetch_related_lookups or queryset._fields is not None:  # type: ignore[attr-defined]
            raise TypeError("sql.Compiled runs querysets of model instances, without prefetch_related")
        compiler = queryset.query.get_compiler(connection=connection)
        self.sql, params = compiler.as_sql()  # fills compiler.select, klass_info and annotation_col_map
        self.params = tuple(params)
        self.compiler = compiler
        select, info = compiler.select, compiler.klass_info
        self.model = info["model"]
        first, last = info["select_fields"][0], info["select_fields"][-1] + 1
        self.own = slice(first, last)
        self.init_list = [column[0].target.attname for column in select[first:last]]
        self.related = get_related_populators(info, select, connection.alias)
        self.annotations = dict(compiler.annotation_col_map or {})
        self.converters = compiler.get_converters([column[0] for column in select[0 : compiler.col_count]])
        self.width = compiler.col_count if compiler.has_extra_select else None  # columns only ordering reads

    def objects(self, params: list[Any]) -> list[Any]:
        rows: Any = _fetch(self.sql, params, self.width)
        if self.converters:
            rows = self.compiler.apply_converters(rows, self.converters)
        out = []
        for row in rows:
            obj = self.model.from_db(connection.alias, self.init_list, row[self.own])
            for populator in self.related:
                populator.populate(row, obj)
            for name, at in self.annotations.items():
                setattr(obj, name, row[at])
            out.append(obj)
        return out


class Rows:
    """Fixed queries of plain values (a `values_list`), compiled by the ORM once and then sent as they are: the
    worker's snapshot reads a dozen such queries on every admission, and building them cost more than running
    them. Rows come back as the queryset would give them: the same tuples, converted by the same fields.

    `rows(shape, build)` calls `build()` the first time it meets `shape`; `shape` must name everything that
    decides the query, its parameters included (a setting it filters by, say). One per process, for any model."""

    MAX_SHAPES = 256

    def __init__(self) -> None:
        self.cache: dict[tuple[str, Hashable], tuple[str, tuple[Any, ...], Any, Any, int | None]] = {}

    def rows(self, shape: Hashable, build: Callable[[], QuerySet[Any]]) -> list[tuple[Any, ...]]:
        key = (connection.alias, shape)
        found = self.cache.get(key)
        if found is None:
            if len(self.cache) >= self.MAX_SHAPES:
                self.cache.clear()
            queryset = build()
            if queryset._iterable_class is not ValuesListIterable:
                raise TypeError("sql.Rows runs values_list() querysets (not flat or named), whose rows are tuples")
            compiler = queryset.query.get_compiler(connection=connection)
            statement, params = compiler.as_sql()
            fields = [s[0] for s in compiler.select[0 : compiler.col_count]]
            width = compiler.col_count if compiler.has_extra_select else None  # columns only ordering reads
            found = self.cache[key] = (statement, tuple(params), compiler, compiler.get_converters(fields), width)
        statement, params, compiler, converters, width = found
        rows = _fetch(statement, params, width)
        if converters:
            return [tuple(row) for row in compiler.apply_converters(rows, converters)]
        return [tuple(row) for row in rows]


ROWS = Rows()


def _fetch(statement: str, params: Sequence[Any], width: int | None) -> list[Any]:
    """A compiled statement's rows, cut to `width` columns where the query selected more only to order by them."""
    with prepared() as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
    return rows if width is None else [row[:width] for row in rows]


def prepared(*, binary_lists: bool = False) -> Any:
    """A cursor for a statement sent again and again in the same form (a compiled one): on PostgreSQL the
    server parses and plans it once per connection, then only executes it with each call's values (a
    submit's joins cost more to plan than to run; bench.profile_submit). Elsewhere (or with
    GRIDLANE_DB_PREPARE off, for a pooler that cannot keep a connection's prepared statements), Django's cursor.
    Either way wrapped as Django wraps its own: counted, logged, its errors translated.

    `binary_lists`: each list goes in PostgreSQL's binary form, its texts as they are, where the text form
    quotes and escapes them one by one (a dispatch's batch of JSON scripts: 70 microseconds of CPU each, about
    100 times the binary form's). The statement casts each list to its type (`%s::uuid[]`): a list of texts
    goes as text[]."""
    db = connections[DEFAULT_DB_ALIAS]  # this thread's (`connection` looks it up again on every attribute)
    if db.vendor != "postgresql" or not settings.GRIDLANE_DB_PREPARE:
        return db.cursor()
    db.close_if_health_check_failed()
    db.ensure_connection()
    with db.wrap_database_errors:
        conn = db.connection
        if conn.prepare_threshold is None:  # Django's: psycopg prepares nothing, even when asked
            conn.prepare_threshold = _ONLY_WHEN_ASKED
        raw = _PreparedCursor(conn)
        if binary_lists:
            raw.adapters.register_dumper(list, ListBinaryDumper)
        loader = conn.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
        if db.timezone != getattr(loader, "timezone", None):  # as Django's own cursors do
            register_tzloader(db.timezone, raw)
        return db._prepare_cursor(raw)  # type: ignore[attr-defined]


# psycopg prepares a statement that was sent this many times, or one sent with prepare=True (only ours are).
_ONLY_WHEN_ASKED = 2**31 - 1


class _PreparedCursor(RawCursor):
    """A server-binding cursor that prepares every statement it executes. It takes Django's form (`%s` for a value,
    `%%` for a percent sign) and sends PostgreSQL's (`$1`, `$2`...), converted once per statement (psycopg converts
    on every call, and keeps the conversion only of short statements: ours are long, and few)."""

    def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: Any = None) -> Any:
        native = numbered(query) if params is not None else query
        done = super().execute(native, params, prepare=True, binary=binary)
        self._query = _Shown(self, query, params)  # type: ignore[assignment]  # what Django's query log reads
        return done


@functools.lru_cache(maxsize=512)
def numbered(statement: str) -> str:
    """A statement in Django's form (`%s` for each value, `%%` for a percent sign) in PostgreSQL's ($1, $2...)."""
    count = 0

    def place(match: re.Match[str]) -> str:
        nonlocal count
        if match[1] == "%":
            return "%"
        count += 1
        return f"${count}"

    native = _PLACEHOLDER.sub(place, statement)
    if "%" in _PLACEHOLDER.sub("", statement):
        raise ValueError(f"a statement holds a % that is neither %s nor %%: {statement[:200]!r}")
    return native


_PLACEHOLDER = re.compile(r"%([s%])")


class _Shown:
    """What Django's query log (DEBUG, the tests' statement counts) shows of a prepared statement: its SQL with
    the values in place, as a client-binding cursor would have sent it. Worked out only when it is read."""

    def __init__(self, cursor: Any, sql: Any, params: Any) -> None:
        self.cursor, self.sql, self.params = cursor, sql, params

    @property
    def query(self) -> bytes:
        with ClientCursor(self.cursor.connection) as client:
            return client.mogrify(self.sql, self.params).encode()


def _stand_in(value: Any, i: int) -> Any:
    """A value of value's type, for a query's i-th parameter, that no real one equals."""
    if isinstance(value, datetime):
        return datetime(1901, 2, 3, 4, 5, 6, 100 + i, tzinfo=UTC)
    if isinstance(value, str):
        return f"\x01gridlane stand-in {i}\x01"
    if isinstance(value, int) and not isinstance(value, bool):
        return -2_000_000_011 - 2 * i
    raise TypeError(f"sql.Compiled takes ids, times and texts as values, not {type(value).__name__}")


def _put(param: Any, by_stand_in: dict[Any, Any]) -> Any:
    """The value for a stand-in, else the parameter as it was (compared by type too: True == 1)."""
    for stand_in, value in by_stand_in.items():
        if type(param) is type(stand_in) and param == stand_in:
            return value
    return param


def field_of(model: type[models.Model], name: str) -> tuple[str, models.Field[Any, Any]]:
    """A concrete field by its name or attname, with its column quoted for SQL written by hand."""
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or field.column is None:
        raise TypeError(f"{model.__name__}.{name} is not a column")
    return connection.ops.quote_name(field.column), field


def related_once(objects: Sequence[models.Model], *names: str) -> None:
    """Give each object its related rows by these foreign keys, each row read once for all the objects (a query
    per key, none for a key no object has) and shared between them: a batch of workloads is mostly one queue's
    and a few people's work, and select_related builds the same rows again for every object."""
    if not objects:
        return
    for name in names:
        field: Any = objects[0]._meta.get_field(name)  # a ForeignKey
        ids = {key for obj in objects if (key := getattr(obj, field.attname)) is not None}
        rows = field.related_model._default_manager.in_bulk(ids) if ids else {}
        for obj in objects:
            key = getattr(obj, field.attname)
            field.set_cached_value(obj, None if key is None else rows.get(key))


def prefetched(instance: Any, related: str, rows: list[Any]) -> None:
    """Fill `instance.<related>.all()` (a reverse foreign key's) with rows read or written by another statement,
    as prefetch_related does. The relation's own filter is built only if a query is built on them (PrefetchedRows)."""
    field = getattr(type(instance), related).field  # the foreign key on the related model that points here
    found = PrefetchedRows(model=field.model)
    found._result_cache = rows
    found._prefetch_done = True  # type: ignore[attr-defined]
    found.relation = (field.name, instance)
    instance._prefetched_objects_cache = {**getattr(instance, "_prefetched_objects_cache", {}), related: found}


class PrefetchedRows(QuerySet[Any]):
    """Rows known already, as prefetched() leaves them for a related manager's `.all()`: iterating them, len,
    count, exists and indexing answer from the rows; a query built on them (filter, order_by, values...) starts
    from the relation's own filter, as it would on what prefetch_related leaves. Building that filter costs a
    tenth of a millisecond, which a submit's answer (its workload's first event) has no need to pay."""

    relation: tuple[str, Any]

    def _chain(self) -> QuerySet[Any]:
        name, instance = self.relation
        return self.model._default_manager.filter(**{name: instance})._chain()  # type: ignore[no-any-return]


def connect() -> None:
    """Read every PostgreSQL connection's timestamps with psycopg's compiled loader (see UtcTimestamps)."""
    connection_created.connect(_fast_timestamps, dispatch_uid="gridlane-utc-timestamps")


def _fast_timestamps(sender: Any, connection: Any, **kwargs: Any) -> None:
    if connection.vendor != "postgresql" or connection.timezone != UTC:
        return
    conn = connection.connection
    if conn.info.timezone == UTC:  # the session reads in UTC (Django set it so)
        conn.adapters.register_loader(TIMESTAMPTZ_OID, UtcTimestamps)


class UtcTimestamps(Loader):
    """A timestamp with time zone, read as psycopg's compiled loader reads it: with the session in UTC (as
    Django sets it when USE_TZ is on and the database's TIME_ZONE is UTC, the default) that is what Django's own
    loader gives too, an aware datetime in UTC, at a tenth of the cost. Django's is written in Python (it
    re-labels each value with the connection's zone, whatever the session's): 3-4 us a value, and the worker
    reads thousands of them a cycle (a backlog's every active workload, each with two to four timestamps).
    Registered only where the connection's zone and the session's are both UTC; elsewhere Django's stays."""

    timezone = UTC  # what Django's cursors compare with the connection's zone before putting their own back

    def __init__(self, oid: int, context: Any = None) -> None:
        super().__init__(oid, context)
        self._compiled = _COMPILED(oid, context)
        self.load = self._compiled.load  # type: ignore[method-assign]  # psycopg calls the compiled one directly

    def load(self, data: Any) -> datetime:  # stands in the class for the instance's own
        return self._compiled.load(data)  # type: ignore[no-any-return]


# The C one where psycopg's binary build is installed (it is a dependency), else psycopg's own in Python.
_COMPILED: type[abc.Loader] = psycopg_adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT) or TimestamptzLoader
