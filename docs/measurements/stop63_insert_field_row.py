"""README, stop 63: single-row INSERTs of a field row, Python's texts against the rows statement,
alternating in one process: ``.venv/bin/python docs/measurements/stop63_insert_field_row.py``."""
import datetime, decimal, random, statistics, tempfile, time, uuid, zoneinfo
import crr, crr.site_dml as sd
real = sd.param_texts
d = tempfile.mkdtemp()
s = crr.Site(f"{d}/s.db", site_id="s")
s.execute("CREATE REPLICATED TABLE obs (id UUID PRIMARY KEY, seen TIMESTAMPTZ, temp FLOAT, cost DECIMAL(9,2), tick TIME, photo BLOB)")
rng = random.Random(1)
z = zoneinfo.ZoneInfo("Europe/Berlin")
def row():
    return [uuid.uuid4(), datetime.datetime(2026, 11, 29, rng.randrange(24), rng.randrange(60), tzinfo=z), rng.uniform(-10, 40),
            decimal.Decimal(rng.randrange(10**6)) / 100, datetime.time(rng.randrange(24), rng.randrange(60), 0, rng.randrange(10**6)), rng.randbytes(16)]
times = {True: [], False: []}
for i in range(500):
    py = i % 2 == 0
    sd.param_texts = real if py else (lambda *a: None)
    r = row()
    t = time.perf_counter(); s.execute("INSERT INTO obs VALUES (?, ?, ?, ?, ?, ?)", r); times[py].append(time.perf_counter() - t)
for k in (True, False):
    print("python texts" if k else "rows statement", f"median {statistics.median(times[k][50:])*1e3:.2f} ms")
