"""README, stop 63: 1-row merges of a field-device row, the point route against the batch route (the
route before stop 63 for such a table), alternating in one process. Run from the repository:
``.venv/bin/python docs/measurements/stop63_merge_field_row.py [plain|views]``."""
import datetime, random, statistics, sys, tempfile, time, uuid
import crr, crr.site_merge as sm

VIEWS = sys.argv[1] == "views" if len(sys.argv) > 1 else False
ddl = "CREATE REPLICATED TABLE obs (id UUID PRIMARY KEY, at TIMESTAMP, day DATE, temp FLOAT, lat DOUBLE, note VARCHAR)"
d = tempfile.mkdtemp()
src, dst = crr.Site(f"{d}/src.db", site_id="src"), crr.Site(f"{d}/dst.db", site_id="dst")
for s in (src, dst):
    s.execute(ddl)
    if VIEWS:
        s.execute("CREATE MATERIALIZED VIEW hot AS SELECT day, temp FROM obs WHERE temp > 20")
src.insert_many("obs", [(uuid.uuid4(), datetime.datetime(2026, 1, 1), datetime.date(2026, 1, 1), 1.5, 2.5, "x") for _ in range(1000)])
dst.merge(src.changes().to_bytes(), track=True)
real = sm.received_new_rows
times = {True: [], False: []}
rng = random.Random(1)
for i in range(600):
    before = src.cursor
    src.execute("INSERT INTO obs VALUES (?, ?, ?, ?, ?, ?)", [uuid.uuid4(), datetime.datetime(2026, 11, 29, 8, rng.randrange(60), rng.randrange(60), rng.randrange(10**6)),
                datetime.date(2026, 11, rng.randrange(1, 29)), rng.uniform(-10, 40), rng.uniform(-90, 90), f"n{i}"])
    data = src.changes(since=before).to_bytes()
    point = i % 2 == 0
    sm.received_new_rows = real if point else (lambda *args: None)  # the batch route, as tests/test_point_merge.py forces it
    t = time.perf_counter(); dst.merge(data, track=True); times[point].append(time.perf_counter() - t)
for k in (True, False):
    xs = times[k][50:]
    print("point" if k else "batch", f"median {statistics.median(xs)*1e3:.2f} ms  p90 {sorted(xs)[int(len(xs)*.9)]*1e3:.2f} ms")
