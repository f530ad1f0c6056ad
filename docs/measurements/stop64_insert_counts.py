"""README, stop 64: a local INSERT into a table with a projection and a join view, its one statement
counting only its APP rows against counting the rows of the views' writes too, alternating in one
process: ``.venv/bin/python docs/measurements/stop64_insert_counts.py [PARTNER_ROWS]``."""
import statistics, sys, tempfile, time
import crr, crr.point as point
real = point.new_rows_insert_sql
counting = {"views": False}
point.new_rows_insert_sql = lambda rel, count, unchecked, then=(), counted=True: real(
    rel, count, unchecked, then, counted or counting["views"])
partners = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
d = tempfile.mkdtemp()
s = crr.Site(f"{d}/s.db", site_id="s")
s.execute("CREATE REPLICATED TABLE tv (k INTEGER PRIMARY KEY, v VARCHAR)")
s.execute("CREATE REPLICATED TABLE d (k INTEGER PRIMARY KEY, w VARCHAR)")
s.insert_many("d", [(i, f"w{i}") for i in range(partners)])
s.execute("CREATE MATERIALIZED VIEW tv_proj AS SELECT v FROM tv")
s.execute("CREATE MATERIALIZED VIEW tv_join AS SELECT tv.k, tv.v, d.w FROM tv JOIN d ON tv.k = d.k")
times = {True: [], False: []}
for i in range(600):
    counting["views"] = i % 2 == 1
    t = time.perf_counter(); s.execute("INSERT INTO tv VALUES (?, ?)", [i, "x"]); times[counting["views"]].append(time.perf_counter() - t)
for views in (True, False):
    print("views' rows counted" if views else "APP rows only", f"median {statistics.median(times[views][40:]) * 1e3:.2f} ms")
view = sorted(s.execute("SELECT * FROM tv_join"))
assert view == sorted(s._con.execute("SELECT tv.k, tv.v, d.w FROM tv JOIN d ON tv.k = d.k").fetchall())
