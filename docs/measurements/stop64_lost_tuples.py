"""README, stop 64: single-row DELETEs or UPDATEs of a table with views whose tuples have several
derivations, the removal of tuples by anti-joins (crr.maintain_sql.lost_tuples_sql) against the
grouping by tuple it replaced, alternating in one process:
``.venv/bin/python docs/measurements/stop64_lost_tuples.py delete|update [narrow|wide] [ROWS]``
(narrow: a projection and a join view; wide: a projection of a join, two ids a derivation, whose
tuples are grouped both ways since the anti-joins made its UPDATE slower at 200k rows)."""
import statistics, sys, tempfile, time
import crr, crr.maintain as maintain
from crr.batch_rows import cols_sql
from crr.maintain_sql import membership_changes_sql
kind = sys.argv[1]
wide = len(sys.argv) > 2 and sys.argv[2] == "wide"
rows = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
new = maintain.lost_tuples_sql
def grouped(rel, held, visibility):  # stop 63's form
    return f"SELECT {cols_sql(rel)} FROM ({membership_changes_sql(rel, f'{held} m', visibility)}) WHERE NOT keep"
anti = {"on": True}
maintain.lost_tuples_sql = lambda *a: (new if anti["on"] else grouped)(*a)
d = tempfile.mkdtemp()
s = crr.Site(f"{d}/s.db", site_id="s")
s.execute("CREATE REPLICATED TABLE tv (k INTEGER PRIMARY KEY, v VARCHAR)")
s.execute("CREATE REPLICATED TABLE d (k INTEGER PRIMARY KEY, w VARCHAR)")
s.insert_many("d", [(i, f"w{i % 40}") for i in range(rows)])
views = ({"p": "SELECT d.w FROM tv JOIN d ON tv.k = d.k"} if wide else
         {"p": "SELECT v FROM tv", "j": "SELECT tv.k, tv.v, d.w FROM tv JOIN d ON tv.k = d.k"})
for name, query in views.items():
    s.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
s.insert_many("tv", [(i, f"v{i % 50}") for i in range(rows)])
times = {True: [], False: []}
for i in range(400):
    anti["on"] = i % 2 == 0
    sql, p = (("DELETE FROM tv WHERE k = ?", [i]) if kind == "delete" else ("UPDATE tv SET v = ? WHERE k = ?", [f"u{i % 7}", i]))
    t = time.perf_counter(); s.execute(sql, p); times[anti["on"]].append(time.perf_counter() - t)
for on in (False, True):
    print("anti-joins" if on else "grouping", f"median {statistics.median(times[on][20:]) * 1e3:.2f} ms")
for name, query in views.items():  # set semantics: a view holds each tuple once
    assert sorted(s.execute(f"SELECT * FROM {name}")) == sorted(set(s._con.execute(query).fetchall())), name
