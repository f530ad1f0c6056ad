"""Golden delta plans of the view compiler (``sql/compile.py``), the way sqlglot tests its optimizer rules.

``tests/fixtures/compile/delta_plans.sql`` lists view definitions and, for each, the delta plans
``ViewPlan.delta_queries`` emits for a set of changed inputs, rendered as DuckDB SQL with a fixed
``source``: the delta of relation ``r`` is the table ``"d_r"``, its full (new) state the table ``"r"``,
both with the AUG columns ``c0, c1, ...`` and ``_crr_ids``. Each case is checked twice:

* text: the SQL the compiler emits (``plan.sql("duckdb")``, what the engine runs) must equal the
  fixture token for token (sqlglot's DuckDB tokenizer), so only whitespace may differ; the view's
  output columns (``# columns:``) must match too;
* meaning: on small random tables, every plan runs on DuckDB, and with inserts only (the AUG state
  only grows) ``V(new) = V(old) u plans(d)`` holds for the values (``V`` evaluated by plain DuckDB
  from the view's SQL) and for the monomials (``V`` evaluated from the view's branches over the full
  AUG states, not through ``delta_queries``); and each plan finds monomials no other plan finds, so
  leaving out a term of ``d(A x B) = dA x B' + A' x dB`` fails.

To regenerate the fixture from the current compiler (after a deliberate change; then read the diff)::

    CRR_UPDATE_GOLDEN=1 python -m pytest -q tests/test_compile_golden.py

Fixture format (close to sqlglot's ``tests/fixtures/optimizer/*.sql``): a statement ends with a line
ending in ``;``. Lines starting with ``--`` are comments; ``# key: value`` lines just before a
statement are its metadata. ``CREATE REPLICATED TABLE`` statements declare base relations (with
their types). A case is a ``CREATE MATERIALIZED VIEW`` statement with ``# title:``, ``# changed:``
(the relations that got new tuples, comma separated), ``# columns:`` (the view's output columns,
written by the update) and optionally ``# seed:`` (of the random rows; the title by default). The
statements after it, up to the next case, are the expected plans, one per (branch, occurrence of a
changed relation), in the order the compiler emits them. A view a case defines can be read by later
cases (views over views); a later case may define it again. The update keeps every ``--`` comment
above a case or a table and writes the plans with ``-- plan k of n`` labels (other comments
between plans are not kept). Relation names must not start with ``d_``.
"""

from __future__ import annotations

import functools
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pytest
from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB

from crr.sql.compile import ViewPlan, compile_view
from crr.sql.statements import CreateTable, CreateView, classify

FIXTURE = Path(__file__).parent / "fixtures" / "compile" / "delta_plans.sql"
UPDATE = os.environ.get("CRR_UPDATE_GOLDEN", "") not in ("", "0")
DELTA_PREFIX = "d_"
GENERATED = re.compile(r"^--\s*(plan \d+ of \d+:|no plan:)")


# -- the fixed source the golden plans read ----------------------------------------------------------
def golden_source(relation: str, delta: bool) -> exp.Expression:
    """``"d_<relation>"`` for a delta, ``"<relation>"`` for the full new state."""
    return exp.Table(this=exp.to_identifier(f"{DELTA_PREFIX if delta else ''}{relation}", quoted=True))


def _ident(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql("duckdb")


# -- the fixture file ----------------------------------------------------------------------------------
@dataclass
class Statement:
    comments: list[str]
    meta: dict[str, str]
    sql: str  # without the closing ';'


@dataclass
class Case:
    statement: Statement
    view: CreateView
    changed: list[str]
    expected: list[str]
    index: int
    # filled by compiling, in file order
    plan: ViewPlan | None = None
    error: str | None = None
    emitted: list[exp.Select] = field(default_factory=list)
    tables: dict[str, CreateTable] = field(default_factory=dict)  # base relations declared so far
    views: dict[str, tuple[CreateView, ViewPlan]] = field(default_factory=dict)  # views defined before this case

    @property
    def title(self) -> str:
        return self.statement.meta["title"]


def _statements(text: str) -> list[Statement]:
    out: list[Statement] = []
    comments: list[str] = []
    meta: dict[str, str] = {}
    body: list[str] = []
    for line in text.splitlines():
        s = line.strip()
        if not body:
            if not s:
                continue
            if s.startswith("--"):
                if not GENERATED.match(s):
                    comments.append(line.rstrip())
                continue
            if s.startswith("#"):
                key, sep, value = s[1:].partition(":")
                if not sep:
                    raise ValueError(f"fixture metadata needs 'key: value': {line!r}")
                meta[key.strip()] = value.strip()
                continue
        body.append(line.rstrip())
        if s.endswith(";"):
            out.append(Statement(comments, meta, "\n".join(body).strip()[:-1].rstrip()))
            comments, meta, body = [], {}, []
    if body or meta:
        raise ValueError("the fixture ends inside a statement (a statement ends with ';' at the end of a line)")
    return out


def _parse(text: str) -> tuple[list[Statement | Case], list[Case]]:
    items: list[Statement | Case] = []
    cases: list[Case] = []
    for st in _statements(text):
        if "title" in st.meta:
            view = classify(st.sql)
            assert isinstance(view, CreateView), f"case {st.meta['title']!r} must be a CREATE MATERIALIZED VIEW"
            changed = [c.strip() for c in st.meta.get("changed", "").split(",") if c.strip()]
            case = Case(statement=st, view=view, changed=changed, expected=[], index=len(cases))
            items.append(case)
            cases.append(case)
        elif st.meta:
            raise ValueError(f"metadata without '# title:' before {st.sql[:60]!r}")
        elif isinstance(classify(st.sql), CreateTable):
            assert not cases, "declare every table before the first case"
            items.append(st)
        else:
            assert cases, f"an expected plan before any case: {st.sql[:60]!r}"
            cases[-1].expected.append(st.sql)
    return items, cases


def _columns_text(plan: ViewPlan) -> str:
    return ", ".join(f"{_ident(n)} {t}" for n, t in plan.columns)


def _compile(items: list[Statement | Case]) -> None:
    """Compile every case in file order, each seeing the tables and the views defined before it."""
    tables: dict[str, CreateTable] = {}
    views: dict[str, tuple[CreateView, ViewPlan]] = {}
    con = duckdb.connect()  # APP-like tables (user column names, no rows) for DuckDB to type queries

    def relation_columns(name: str):
        if name in tables:
            return [(c.name, c.type_sql) for c in tables[name].columns]
        if name in views:
            return list(views[name][1].columns)
        return None

    def describe(sql: str):
        return [(r[0], r[1]) for r in con.execute(f"DESCRIBE {sql}").fetchall()]

    for item in items:
        if isinstance(item, Statement):
            t = classify(item.sql)
            assert isinstance(t, CreateTable)
            tables[t.name] = t
            cols = ", ".join(f"{_ident(c.name)} {c.type_sql}" for c in t.columns)
            con.execute(f"CREATE TABLE {_ident(t.name)} ({cols})")
            continue
        item.tables, item.views = dict(tables), dict(views)
        try:
            item.plan = compile_view(item.view.name, item.view.query.copy(), relation_columns, describe)
        except Exception as e:  # reported by the case's test
            item.error = f"{type(e).__name__}: {e}"
            continue
        item.emitted = item.plan.delta_queries(set(item.changed), golden_source)
        views[item.view.name] = (item.view, item.plan)
        cols = ", ".join(f"{_ident(n)} {t}" for n, t in item.plan.columns)
        con.execute(f"CREATE OR REPLACE TABLE {_ident(item.view.name)} ({cols})")
    con.close()


def _label(plan: exp.Select, k: int, n: int) -> str:
    """``-- plan k of n: dr AS r x q' AS q``: which factor reads a delta, which the new state."""
    terms = []
    for t in plan.find_all(exp.Table):
        name = t.name
        if name.startswith(DELTA_PREFIX):
            term = f"d{exp.to_identifier(name[len(DELTA_PREFIX):]).sql('duckdb')}"
        else:
            term = f"{exp.to_identifier(name).sql('duckdb')}'"
        terms.append(f"{term} AS {exp.to_identifier(t.alias).sql('duckdb')}")
    return f"-- plan {k} of {n}: {' x '.join(terms)}"


def _render(items: list[Statement | Case]) -> str:
    """The fixture text for the current compiler output (keeps inputs and comments, rewrites outputs)."""
    out: list[str] = []
    first = True
    for item in items:
        if isinstance(item, Statement):
            if item.comments and not first:
                out.append("")
            out += item.comments + [item.sql + ";"]
            first = False
            continue
        st = item.statement
        meta = dict(st.meta)
        if item.plan is not None:
            meta["columns"] = _columns_text(item.plan)
        ordered = {k: meta.pop(k) for k in ("title", "changed", "columns") if k in meta} | meta
        out += ["", ""] + st.comments + [f"# {k}: {v}" for k, v in ordered.items()] + [st.sql + ";"]
        if item.plan is None:  # a compile error: keep what the fixture had
            out += [""] + [e + ";" for e in item.expected]
            continue
        if not item.emitted:
            out += ["", "-- no plan: no input of the view changed"]
        for k, q in enumerate(item.emitted, start=1):
            out += ["", _label(q, k, len(item.emitted)), q.sql("duckdb", pretty=True) + ";"]
    return "\n".join(out).lstrip("\n") + "\n"


@functools.lru_cache(maxsize=None)
def _golden() -> tuple[Case, ...]:
    items, cases = _parse(FIXTURE.read_text(encoding="utf-8"))
    _compile(items)
    if UPDATE:
        FIXTURE.write_text(_render(items), encoding="utf-8")
        items, cases = _parse(FIXTURE.read_text(encoding="utf-8"))
        _compile(items)
    return tuple(cases)


def _case_ids() -> list[str]:
    return [f"{c.index:02d}-{re.sub(r'[^a-z0-9]+', '-', c.title.lower()).strip('-')}" for c in _golden()]


# -- text ------------------------------------------------------------------------------------------
def _tokens(sql: str) -> list[tuple[str, str]]:
    return [(t.token_type.name, t.text) for t in DuckDB().tokenize(sql)]


def _same_sql(emitted: str, expected: str) -> bool:
    return _tokens(emitted) == _tokens(expected)


@pytest.mark.parametrize("index", range(len(_golden())), ids=_case_ids())
def test_delta_plans_match_the_fixture(index):
    case = _golden()[index]
    assert case.error is None, f"{case.title}: the view does not compile: {case.error}"
    assert case.plan is not None
    assert " ".join(case.statement.meta.get("columns", "").split()) == _columns_text(case.plan), \
        f"{case.title}: the view's columns changed (CRR_UPDATE_GOLDEN=1 rewrites the fixture)"
    emitted = [q.sql("duckdb") for q in case.emitted]
    assert len(emitted) == len(case.expected), (
        f"{case.title}: {len(emitted)} plans emitted, the fixture has {len(case.expected)}:\n\n"
        + ";\n\n".join(q.sql("duckdb", pretty=True) for q in case.emitted))
    for k, (got, want) in enumerate(zip(emitted, case.expected), start=1):
        assert _same_sql(got, want), (
            f"{case.title}, plan {k}: the compiler emitted\n{case.emitted[k - 1].sql('duckdb', pretty=True)}\n"
            f"where the fixture has\n{want}\n(CRR_UPDATE_GOLDEN=1 rewrites the fixture)")


def test_the_text_comparison_sees_one_token():
    assert _same_sql('SELECT "r"."c0" FROM "d_r" AS "r"', 'SELECT\n  "r"."c0"\nFROM "d_r"   AS "r"')
    assert not _same_sql('SELECT "r"."c0" FROM "d_r" AS "r"', 'SELECT "r"."c0" FROM "r" AS "r"')
    assert not _same_sql('SELECT \'a b\' FROM "r"', 'SELECT \'a  b\' FROM "r"')
    assert not _same_sql('SELECT "my col" FROM "r"', 'SELECT "my  col" FROM "r"')


def test_the_fixture_round_trips():
    """Rewriting an up-to-date fixture changes nothing, so an update's diff shows only real changes."""
    items, cases = _parse(FIXTURE.read_text(encoding="utf-8"))
    assert len(cases) >= 15
    _compile(items)
    up_to_date = all(c.error is None and len(c.emitted) == len(c.expected)
                     and all(_same_sql(q.sql("duckdb"), e) for q, e in zip(c.emitted, c.expected)) for c in cases)
    if not up_to_date:
        pytest.skip("the fixture differs from the compiler's output (see test_delta_plans_match_the_fixture)")
    assert " ".join(_render(items).split()) == " ".join(FIXTURE.read_text(encoding="utf-8").split())


# -- meaning ---------------------------------------------------------------------------------------
OLD_ROWS, NEW_ROWS, FIRST_NEW_ID = 16, 5, 1000


def _value(type_sql: str, rng: random.Random):
    if rng.random() < 0.08:
        return None
    if "INT" in type_sql.upper():
        return rng.randint(0, 7)
    return rng.choice(["x", "y", "x y", "it's"])


def _lineage(case: Case, name: str) -> set[str]:
    """The base relations ``name`` reads, through views."""
    if name in case.tables:
        return {name}
    plan = case.views[name][1] if name in case.views else None
    assert plan is not None, f"{case.title}: unknown relation {name}"
    return set().union(*(_lineage(case, r) for r in plan.inputs))


def _recompute_check(case: Case, plans: list[str]) -> None:
    """Run ``plans`` (the case's delta plans, as SQL over ``"r"``/``"d_r"``) on small tables and check
    them against recomputing the view on the old and the new state."""
    assert case.plan is not None
    inputs = case.plan.inputs
    unknown = [c for c in case.changed if c not in case.tables and c not in case.views]
    assert not unknown, f"{case.title}: '# changed:' names unknown relations {unknown}"
    grown = set().union(*(_lineage(case, c) for c in case.changed))  # the base relations that get tuples
    moved = {r for r in inputs if _lineage(case, r) & grown}
    assert moved == set(case.changed) & set(inputs), (
        f"{case.title}: '# changed:' must list exactly the inputs whose base relations get tuples "
        f"(here {sorted(moved)})")
    needed = set().union(*(_lineage(case, r) for r in inputs))
    read_views = set().union(*({r} | _view_closure(case, r) for r in inputs if r in case.views))
    views = [n for n in case.views if n in read_views]  # file order is dependency order

    rng = random.Random(case.statement.meta.get("seed", case.title))
    next_id = iter(range(1, FIRST_NEW_ID))
    new_id = iter(range(FIRST_NEW_ID, 10 * FIRST_NEW_ID))
    con = duckdb.connect()
    try:
        for schema in ("app_old", "app_new", "aug_old"):
            con.execute(f"CREATE SCHEMA {schema}")
        for name in sorted(needed):
            decl = case.tables[name]
            user = ", ".join(f"{_ident(c.name)} {c.type_sql}" for c in decl.columns)
            aug = ", ".join(f"c{i} {c.type_sql}" for i, c in enumerate(decl.columns)) + ", _crr_ids BIGINT[]"
            for schema in ("app_old", "app_new"):
                con.execute(f"CREATE TABLE {schema}.{_ident(name)} ({user})")
            for table in (f"aug_old.{_ident(name)}", _ident(name), _ident(DELTA_PREFIX + name)):
                con.execute(f"CREATE TABLE {table} ({aug})")
            user_slots = ", ".join(["?"] * len(decl.columns))
            old = [[_value(c.type_sql, rng) for c in decl.columns] + [[next(next_id)]] for _ in range(OLD_ROWS)]
            new = ([[_value(c.type_sql, rng) for c in decl.columns] + [[next(new_id)]] for _ in range(NEW_ROWS)]
                   if name in grown else [])
            # old rows: in every state; new rows: in the new states and the delta
            for rows, app_tables, aug_tables in (
                    (old, ("app_old", "app_new"), (f"aug_old.{_ident(name)}", _ident(name))),
                    (new, ("app_new",), (_ident(name), _ident(DELTA_PREFIX + name)))):
                if not rows:
                    continue
                for schema in app_tables:
                    con.executemany(f"INSERT INTO {schema}.{_ident(name)} VALUES ({user_slots})",
                                    [r[:-1] for r in rows])
                for table in aug_tables:
                    con.executemany(f"INSERT INTO {table} VALUES ({user_slots}, ?)", rows)
        for name in views:
            view, plan = case.views[name]
            _materialize(con, name, view, plan)
            if name in case.changed:
                con.execute(f"CREATE TABLE {_ident(DELTA_PREFIX + name)} AS "
                            f"SELECT * FROM {_ident(name)} EXCEPT SELECT * FROM aug_old.{_ident(name)}")

        outs = [{_row(r) for r in con.execute(sql).fetchall()} for sql in plans]
        out: set[tuple] = set().union(*outs)
        assert all(any(i >= FIRST_NEW_ID for i in r[-1]) for r in out), \
            f"{case.title}: a plan derived a product of old tuples only"
        if plans:
            assert out, f"{case.title}: the plans found nothing on this data; try another '# seed:'"

        # values: plain DuckDB on the view's SQL, old and new state
        def values(schema: str) -> set[tuple]:
            con.execute(f"SET search_path = '{schema}'")
            try:
                return {tuple(r) for r in con.execute(f"SELECT DISTINCT * FROM ({case.view.sql})").fetchall()}
            finally:
                con.execute("SET search_path = 'main'")
        old_values, new_values = values("app_old"), values("app_new")
        out_values = {r[:-1] for r in out}
        assert new_values == old_values | out_values, (
            f"{case.title}: V(new) != V(old) u plans\n"
            f" missing: {sorted(new_values - old_values - out_values, key=repr)}\n"
            f" extra: {sorted(out_values - new_values, key=repr)}")

        # monomials: the view with every input full, on the old and on the new state
        full_old, full_new = (_full(con, case.plan, schema) for schema in ("aug_old", None))
        assert {r[:-1] for r in full_old} == old_values and {r[:-1] for r in full_new} == new_values, \
            f"{case.title}: the view's branches over the AUG state disagree with DuckDB on the view's SQL"
        assert full_new == full_old | out, (
            f"{case.title}: monomials of V(new) != V(old) + plans\n missing: "
            f"{sorted(full_new - full_old - out, key=repr)}\n extra: {sorted(out - full_new, key=repr)}")
        # the data exercises every plan: each finds monomials no other plan finds, so a compiler
        # that dropped a term (or read a delta where it should read a state) would fail above
        for k in range(len(outs)):
            others = set().union(*(o for j, o in enumerate(outs) if j != k))
            assert outs[k] - others - full_old, \
                f"{case.title}: plan {k + 1} adds nothing the others miss on this data; try another '# seed:'"
    finally:
        con.close()


def _view_closure(case: Case, name: str) -> set[str]:
    """The views ``name`` reads, directly or through other views."""
    if name not in case.views:
        return set()
    return set().union(set(), *({r} | _view_closure(case, r) for r in case.views[name][1].inputs if r in case.views))


def _row(r: tuple) -> tuple:
    return tuple(r[:-1]) + (tuple(sorted(r[-1])),)


def _full_sql(plan: ViewPlan, schema: str | None) -> str:
    """The view with its monomials over full AUG states (in ``schema``), built from the branches
    directly, not through ``delta_queries`` (which is what the check is about)."""
    def table(relation: str) -> exp.Expression:
        return exp.Table(this=exp.to_identifier(relation, quoted=True),
                         db=exp.to_identifier(schema, quoted=True) if schema else None)
    names, types = [f"c{i}" for i in range(len(plan.columns))], [t for _, t in plan.columns]
    selects = [b.select(names, types, lambda j, b=b: table(b.occurrences[j].relation), with_ids=True)
               for b in (b.positional() for b in plan.branches)]
    return " UNION ".join(f"({q.sql('duckdb')})" for q in selects)


def _full(con: duckdb.DuckDBPyConnection, plan: ViewPlan, schema: str | None) -> set[tuple]:
    return {_row(r) for r in con.execute(_full_sql(plan, schema)).fetchall()}


def _materialize(con: duckdb.DuckDBPyConnection, name: str, view: CreateView, plan: ViewPlan) -> None:
    """A view input's states: APP values (old, new) from its SQL, AUG monomials (old, new) from its branches."""
    for schema in ("app_old", "app_new"):
        con.execute(f"SET search_path = '{schema}'")
        con.execute(f"CREATE TABLE {schema}.{_ident(name)} AS SELECT DISTINCT * FROM ({view.sql})")
    con.execute("SET search_path = 'main'")
    con.execute(f"CREATE TABLE aug_old.{_ident(name)} AS {_full_sql(plan, 'aug_old')}")
    con.execute(f"CREATE TABLE {_ident(name)} AS {_full_sql(plan, None)}")


@pytest.mark.parametrize("index", range(len(_golden())), ids=_case_ids())
def test_delta_plans_agree_with_recomputation(index):
    case = _golden()[index]
    assert case.error is None, f"{case.title}: the view does not compile: {case.error}"
    _recompute_check(case, [q.sql("duckdb") for q in case.emitted])


def _two_way_join() -> Case:
    """The first case that joins two different relations, both changed."""
    return next(c for c in _golden() if c.plan is not None and len(c.emitted) == 2 and len(c.plan.branches) == 1
                and len({o.relation for o in c.plan.branches[0].occurrences}) == 2)


def test_the_recomputation_check_catches_a_missing_term():
    """Leaving out ``A' x dB`` from ``d(A x B) = dA x B' + A' x dB`` must fail the check."""
    case = _two_way_join()
    plans = [q.sql("duckdb") for q in case.emitted]
    _recompute_check(case, plans)
    with pytest.raises(AssertionError, match="V\\(new\\) != V\\(old\\)"):
        _recompute_check(case, plans[:1])


def test_the_recomputation_check_catches_a_wrong_monomial():
    """A join's monomial is the product of both sides' monomials; keeping one side's must fail."""
    case = _two_way_join()
    product = re.compile(r'LIST_SORT\(LIST_DISTINCT\(LIST_CONCAT\(("\w+"\."_crr_ids"), "\w+"\."_crr_ids"\)\)\)')
    plans = [product.sub(r"\1", q.sql("duckdb")) for q in case.emitted]
    assert all("LIST_CONCAT" not in p for p in plans)
    with pytest.raises(AssertionError, match="monomials|old tuples"):
        _recompute_check(case, plans)


def _single_id_cases() -> list[int]:
    """The cases with a plan that multiplies exactly two base relations' monomials."""
    return [c.index for c in _golden() if c.plan is not None and c.emitted and any(
        len(b.occurrences) == 2 and all(o.relation in c.tables for o in b.occurrences) for b in c.plan.branches)]


@pytest.mark.parametrize("index", _single_id_cases())
def test_single_id_products_equal_the_general_form(index):
    """Told which inputs hold one id per monomial (base relations), the compiler multiplies two such
    monomials with a CASE (``sql.compile.monomial_product``); on the meaning check's data its plans
    must return exactly the rows of the general form, each monomial the same list in the same
    order (a swapped pair, a 0-based index or a self-joined tuple kept twice fails), and pass the
    recomputation check themselves."""
    case = _golden()[index]
    single = case.plan.delta_queries(set(case.changed), golden_source, lambda r: r in case.tables)
    texts = [q.sql("duckdb") for q in single]
    assert any("CASE WHEN" in t and "LIST_CONCAT" not in t for t in texts)
    _recompute_check(case, texts)
    captured: list[list[tuple]] = []
    original = duckdb.DuckDBPyConnection.execute

    def run_both(con, sql, *args):  # the recomputation check's connection: run each plan both ways
        result = original(con, sql, *args)
        if sql in texts:
            general = case.emitted[texts.index(sql)].sql("duckdb")
            captured.append([sorted(map(repr, original(con, q).fetchall())) for q in (sql, general)])
            result = original(con, sql, *args)
        return result
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(duckdb.DuckDBPyConnection, "execute", run_both)
        _recompute_check(case, texts)
    assert len(captured) == len(texts)
    for got, want in captured:
        assert got == want and got
