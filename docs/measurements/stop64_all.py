"""README, stop 64: single-row INSERTs, UPDATEs and DELETEs of a table with a projection and a join
view (crr bench writes' tables: 200 rows written one at a time, then updated, then deleted), with
stop 64's three statement changes against without them (the views' counts in a local INSERT,
DISTINCT ON for one row, tuples removed by grouping), alternating in one process:
``.venv/bin/python docs/measurements/stop64_all.py [OPS]``."""
import statistics, sys, tempfile, time
import crr, crr.maintain as maintain, crr.point as point
from crr.batch_rows import cols_sql
from crr.maintain_sql import membership_changes_sql
ops = int(sys.argv[1]) if len(sys.argv) > 1 else 200
new = {"on": True}
insert_sql, append_parts, lost = point.new_rows_insert_sql, maintain.Maintainer._append_parts, maintain.lost_tuples_sql
point.new_rows_insert_sql = lambda rel, count, unchecked, then=(), counted=True: insert_sql(
    rel, count, unchecked, then, counted or not new["on"])
maintain.Maintainer._append_parts = lambda self, n, rel, view, cand, one_row=False: append_parts(
    self, n, rel, view, cand, one_row and new["on"])
maintain.lost_tuples_sql = lambda rel, held, vis: lost(rel, held, vis) if new["on"] else (
    f"SELECT {cols_sql(rel)} FROM ({membership_changes_sql(rel, f'{held} m', vis)}) WHERE NOT keep")
d = tempfile.mkdtemp()
s = crr.Site(f"{d}/s.db", site_id="s")
s.execute("CREATE REPLICATED TABLE tv (k INTEGER PRIMARY KEY, v VARCHAR)")
s.execute("CREATE REPLICATED TABLE d (k INTEGER PRIMARY KEY, w VARCHAR)")
s.insert_many("d", [(i, f"w{i}") for i in range(ops)])
views = {"p": "SELECT v FROM tv", "j": "SELECT tv.k, tv.v, d.w FROM tv JOIN d ON tv.k = d.k"}
for name, query in views.items():
    s.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
statements = {"insert": ("INSERT INTO tv VALUES (?, ?)", lambda i: [i, "x"]),
              "update": ("UPDATE tv SET v = ? WHERE k = ?", lambda i: [f"y{i}", i]),
              "delete": ("DELETE FROM tv WHERE k = ?", lambda i: [i])}
for kind, (sql, params) in statements.items():
    times = {True: [], False: []}
    for i in range(ops):
        new["on"] = i % 2 == 0
        t = time.perf_counter(); s.execute(sql, params(i)); times[new["on"]].append(time.perf_counter() - t)
    print(kind, *(f"{'stop 64' if on else 'before'} {statistics.median(times[on]) * 1e3:.2f} ms" for on in (False, True)))
    for name, query in views.items():
        assert sorted(s.execute(f"SELECT * FROM {name}")) == sorted(set(s._con.execute(query).fetchall())), name
