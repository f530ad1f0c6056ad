"""README, stop 64: single-row INSERTs or UPDATEs of a table with a projection and a join view,
the projection's new APP rows without DISTINCT ON (the write adds one row) against with it,
alternating in one process: ``.venv/bin/python docs/measurements/stop64_one_row.py insert|update``."""
import statistics, sys, tempfile, time
import crr, crr.maintain as maintain
kind = sys.argv[1]
real = maintain.Maintainer._append_parts
fast = {"on": True}
maintain.Maintainer._append_parts = lambda self, n, rel, view, cand, one_row=False: real(
    self, n, rel, view, cand, one_row and fast["on"])
d = tempfile.mkdtemp()
s = crr.Site(f"{d}/s.db", site_id="s")
s.execute("CREATE REPLICATED TABLE tv (k INTEGER PRIMARY KEY, v VARCHAR)")
s.execute("CREATE REPLICATED TABLE d (k INTEGER PRIMARY KEY, w VARCHAR)")
s.insert_many("d", [(i, f"w{i}") for i in range(2000)])
views = {"p": "SELECT v FROM tv", "j": "SELECT tv.k, tv.v, d.w FROM tv JOIN d ON tv.k = d.k"}
for name, query in views.items():
    s.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
if kind == "update":
    s.insert_many("tv", [(i, f"v{i % 50}") for i in range(2000)])
times = {True: [], False: []}
for i in range(400):
    fast["on"] = i % 2 == 0
    sql, p = (("INSERT INTO tv VALUES (?, ?)", [i, "x"]) if kind == "insert" else ("UPDATE tv SET v = ? WHERE k = ?", [f"u{i % 7}", i]))
    t = time.perf_counter(); s.execute(sql, p); times[fast["on"]].append(time.perf_counter() - t)
for on in (False, True):
    print("without DISTINCT ON" if on else "with DISTINCT ON", f"median {statistics.median(times[on][20:]) * 1e3:.2f} ms")
for name, query in views.items():
    assert sorted(s.execute(f"SELECT * FROM {name}")) == sorted(set(s._con.execute(query).fetchall())), name
