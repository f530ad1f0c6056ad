"""README, stop 63: single-row UPDATEs by key, the key lookup against the rows statement and the
lookup, alternating in one process: ``.venv/bin/python docs/measurements/stop63_update_by_key.py ROWS [views]``."""
import random, statistics, sys, tempfile, time
import crr, crr.site_dml as sd
real = sd.keyed_update_texts
n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
views = len(sys.argv) > 2
d = tempfile.mkdtemp()
s = crr.Site(f"{d}/s.db", site_id="s")
s.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR, f DOUBLE)")
s.execute("CREATE REPLICATED TABLE d (k INTEGER PRIMARY KEY, w VARCHAR)")
if views:
    s.execute("CREATE MATERIALIZED VIEW p AS SELECT v FROM t")
    s.execute("CREATE MATERIALIZED VIEW j AS SELECT t.k, t.v, d.w FROM t JOIN d ON t.k = d.k")
s.insert_many("t", [(i, f"v{i}", i * 0.5) for i in range(n)])
s.insert_many("d", [(i, f"w{i}") for i in range(0, n, 7)])
rng = random.Random(1)
times = {True: [], False: []}
for i in range(400):
    fast = i % 2 == 0
    sd.keyed_update_texts = real if fast else (lambda *a: None)
    k = rng.randrange(n)
    t = time.perf_counter(); s.execute("UPDATE t SET v = ? WHERE k = ?", [f"u{i}", k]); times[fast].append(time.perf_counter() - t)
for k in (True, False):
    print(f"n={n} views={views}", "by key" if k else "rows+lookup", f"median {statistics.median(times[k][40:])*1e3:.2f} ms")
