"""Tuple ids pinned to literal values, read through the public API, and convergence of special values.

The ids below were computed by crr (relation ``v``, one column ``x`` of the type). Ids are replicated
state: if one of these changes, sites on the old and new code stop agreeing on which tuples are the
same. Change them only together with a storage/changeset version bump, never to make a test pass.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
import textwrap
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest

import crr
from crr.types import key_hash, tuple_id

NAN, INF = float("nan"), float("inf")

# (column type, [(SQL literal inserted, the same value in Python, pinned id)]): the values of one
# group are pairwise distinct, and none two of them come back from DuckDB as equal Python values
# (DuckDB's client returns infinite dates as date.max, so the real extremes have a group of their own).
PINNED: list[tuple[str, list[tuple[str, Any, int]]]] = [
    ('TINYINT', [
        ('-128', -128, 180874608547012478185830467377233580061),
        ('127', 127, 247757009791064725034152104321374422297),
        ('0', 0, 283795922757829132775555548822326821907),
        ('-1', -1, 58641710271042203724421049276673610459),
        ('NULL', None, 110956987879582174677617807875676483567),
    ]),
    ('SMALLINT', [
        ('-32768', -32768, 317392310090030663611974289125104476620),
        ('32767', 32767, 11296089231847666940957511970624033951),
    ]),
    ('INTEGER', [
        ('-2147483648', -2147483648, 134420474807734140222867196023672225230),
        ('2147483647', 2147483647, 135967496461661080071036099702034638542),
        ('1', 1, 220209202512091791132961398569040748286),
    ]),
    ('BIGINT', [
        ('-9223372036854775808', -9223372036854775808, 104611879759271581078677103229383520882),
        ('9223372036854775807', 9223372036854775807, 82136376206024496242839560449762482651),
    ]),
    ('HUGEINT', [
        ('-170141183460469231731687303715884105728', -170141183460469231731687303715884105728, 86908750240778578900404247693817806541),
        ('170141183460469231731687303715884105727', 170141183460469231731687303715884105727, 111134297359324892257277113377176308658),
    ]),
    ('UTINYINT', [
        ('255', 255, 130900285480009783238377854514519081841),
    ]),
    ('USMALLINT', [
        ('65535', 65535, 320365449152669981010172687998683166317),
    ]),
    ('UINTEGER', [
        ('4294967295', 4294967295, 270922907205091955651598326824565143430),
    ]),
    ('UBIGINT', [
        ('18446744073709551615', 18446744073709551615, 298736869394341540124896313038683261295),
    ]),
    ('UHUGEINT', [
        ('340282366920938463463374607431768211455', 340282366920938463463374607431768211455, 272401462385513844762408749378533109291),
        ('0', 0, 283795922757829132775555548822326821907),
    ]),
    ('DECIMAL(4,2)', [
        ('99.99', Decimal('99.99'), 128748107560063314928511882229887920907),
        ('-99.99', Decimal('-99.99'), 42420640157006333289764391996502368869),
        ('-0.01', Decimal('-0.01'), 22262582002876961239581837572214514899),
        ('0', Decimal('0'), 319565184230338295905891996474821164989),
        ('1.5', Decimal('1.5'), 21685236713840790144825539265826232230),
        ('NULL', None, 110956987879582174677617807875676483567),
    ]),
    ('DECIMAL(3,3)', [
        ('0.5', Decimal('0.5'), 91206365763294104817627409103561414071),
        ('-0.5', Decimal('-0.5'), 126234311326697399215800377255478009396),
        ('0', Decimal('0'), 178154488326526191423274469268531586111),
    ]),
    ('DECIMAL(38,10)', [
        ('9999999999999999999999999999.9999999999', Decimal('9999999999999999999999999999.9999999999'), 251870209726036735016547431669222490160),
        ('-0.0000000001', Decimal('-1E-10'), 271616045995761752227271707486167259619),
    ]),
    ('DOUBLE', [
        ('0.0', 0.0, 236028522975480980442090062587192067695),
        ("'nan'", NAN, 336716092305996377810600680075354144158),
        ("'inf'", INF, 211219829240300391647637216612524396263),
        ("'-inf'", -INF, 319931133586954494859936955671237543260),
        ('5e-324', 5e-324, 7576650166197499119521551929478389022),
        ('1.7976931348623157e308', 1.7976931348623157e+308, 19519184612502251610252370612634941634),
        ('1.0', 1.0, 242641463253015704699428089280273327958),
        ('0.1', 0.1, 326844832629135805521037880729114953507),
        ('NULL', None, 110956987879582174677617807875676483567),
    ]),
    ('FLOAT', [
        ('0.0', 0.0, 236028522975480980442090062587192067695),
        ("'nan'", NAN, 336716092305996377810600680075354144158),
        ("'inf'", INF, 211219829240300391647637216612524396263),
        ("'-inf'", -INF, 319931133586954494859936955671237543260),
        ('0.1', 0.1, 262579889492166584442858315831336509689),
        ('3.4028235e38', 3.4028234663852886e+38, 197754390374983205766880172646231172051),
    ]),
    ('VARCHAR', [
        ("''", '', 310576459352877442229170362787356783607),
        ("'|'", '|', 185493074451045597462182949174261308041),
        ("':'", ':', 34014358181028980522700291414574548321),
        ("'1:a|b'", '1:a|b', 251773229639372622418445240925051348647),
        ("'N'", 'N', 76376661416988680141577174529836242122),
        ("'héllo|x'", 'héllo|x', 308058295630012072139815165580679254764),
        ("'😀'", '😀', 103374196370422726362184177257915518673),
        ('NULL', None, 110956987879582174677617807875676483567),
        ('chr(0)', '\x00', 289002550253987866039211768035934991258),
        ("'a' || chr(0) || 'b'", 'a\x00b', 119547097911417168828318876578420322767),
    ]),
    ('BOOLEAN', [
        ('true', True, 151856111062120435963037927627458110501),
        ('false', False, 282798067190642917291792966592165315400),
        ('NULL', None, 110956987879582174677617807875676483567),
    ]),
    ('DATE', [
        ("DATE '2024-02-29'", datetime.date(2024, 2, 29), 11039655144367776296090278441573396488),
        ("'infinity'", 'infinity', 201180115762477560240706303893197042354),
        ("'-infinity'", '-infinity', 157625743721644419527482594053782687131),
        ("DATE '0044-03-15 (BC)'", '0044-03-15 (BC)', 179958551715594590758607908573739441529),
        ('NULL', None, 110956987879582174677617807875676483567),
    ]),
    ('DATE', [
        ("DATE '9999-12-31'", datetime.date(9999, 12, 31), 149223434080687848230098405345362350656),
        ("DATE '0001-01-01'", datetime.date(1, 1, 1), 32955928721921437751183478688825986787),
        ("DATE '5881580-07-10'", '5881580-07-10', 312400694217312086312693125427036786649),
        ("DATE '5877642-06-25 (BC)'", '5877642-06-25 (BC)', 189123807382396373064082124800943801872),
    ]),
    ('TIMESTAMP', [
        ("TIMESTAMP '2024-01-01 10:00:00.123456'", datetime.datetime(2024, 1, 1, 10, 0, 0, 123456), 103914198895410887504131135063875204070),
        ("'infinity'", 'infinity', 102894246279769213624950035509163386109),
        ("'-infinity'", '-infinity', 194927787778192499863651842203380599488),
        ("TIMESTAMP '290309-12-22 (BC) 00:00:00'", '290309-12-22 (BC) 00:00:00', 253797044167473567629959927794435297557),
        ('NULL', None, 110956987879582174677617807875676483567),
    ]),
    ('TIMESTAMP', [
        ("TIMESTAMP '9999-12-31 23:59:59.999999'", datetime.datetime(9999, 12, 31, 23, 59, 59, 999999), 293526375658759822926078733168993784220),
        ("TIMESTAMP '0001-01-01 00:00:00'", datetime.datetime(1, 1, 1, 0, 0), 297471217783395027822915328565758705835),
        ("TIMESTAMP '294247-01-10 04:00:54.775806'", '294247-01-10 04:00:54.775806', 148988878470599013274505604876618388693),
    ]),
    ('TIMESTAMPTZ', [
        ("TIMESTAMPTZ '2024-01-01 10:00:00+02'", datetime.datetime(2024, 1, 1, 8, 0, tzinfo=datetime.timezone.utc), 9822532389100235329657996902463741833),
        ("'infinity'", 'infinity', 114929597896120556485740058822538307883),
        ("'-infinity'", '-infinity', 5631037085913372712762486207244795631),
        ('NULL', None, 110956987879582174677617807875676483567),
    ]),
    ('TIMESTAMPTZ', [
        ("TIMESTAMPTZ '9999-12-31 23:59:59.999999+00'", datetime.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=datetime.timezone.utc), 50944690582786134016047980988501925944),
        ("TIMESTAMPTZ '0001-01-01 00:00:00+00'", datetime.datetime(1, 1, 1, 0, 0, tzinfo=datetime.timezone.utc), 32631282878343473688953422139767710443),
    ]),
    ('TIME', [
        ("TIME '00:00:00'", datetime.time(0, 0), 253158122291607582661211066058339056368),
        ("TIME '24:00:00'", '24:00:00', 97677277795208746022986679646024639772),
        ("TIME '23:59:59.5'", datetime.time(23, 59, 59, 500000), 3966161561484487185899699451171274628),
        ('NULL', None, 110956987879582174677617807875676483567),
    ]),
    ('BLOB', [
        ("''::BLOB", b'', 277828594133607866018391723365477188063),
        ("'\\x00'::BLOB", b'\x00', 8730501707151714902057572279099757799),
        ("'\\x00\\xFF|'::BLOB", b'\x00\xff|', 296952384257563008604627126815902753795),
        ('NULL', None, 110956987879582174677617807875676483567),
    ]),
    ('UUID', [
        ("'00000000-0000-0000-0000-000000000000'", UUID('00000000-0000-0000-0000-000000000000'), 108884633334830548270276310855262114368),
        ("'ffffffff-ffff-ffff-ffff-ffffffffffff'", UUID('ffffffff-ffff-ffff-ffff-ffffffffffff'), 79455077112155195029964052554945592675),
        ('NULL', None, 110956987879582174677617807875676483567),
    ]),
]


def _ids(site: crr.Site) -> set[int]:
    return {mono[0] for monos in site.provenance("v").values() for mono in monos}


@pytest.mark.parametrize("type_, entries", PINNED, ids=[f"{t}-{i}" for i, (t, _) in enumerate(PINNED)])
def test_pinned_ids_of_every_type_and_special_value(type_: str, entries: list[tuple[str, Any, int]]) -> None:
    """Each insert of a distinct value adds exactly one tuple, with the pinned id; Python agrees."""
    site = crr.Site()
    site.execute(f"CREATE REPLICATED TABLE v (x {type_})")
    columns = site.relation("v").columns
    seen: set[int] = set()
    for n, (literal, value, pinned) in enumerate(entries, start=1):
        site.execute(f"INSERT INTO v VALUES ({literal})")
        new = _ids(site) - seen
        assert new == {pinned}, f"{type_} {literal}: id {new} (pinned {pinned})"
        seen |= new
        assert site.execute("SELECT count(*) FROM v") == [(n,)], f"{type_} {literal} merged with another value"
        assert tuple_id("v", columns, [value]) == pinned, f"{type_} {literal}: Python id differs"


def test_pinned_multi_column_and_keyed_ids() -> None:
    """Ids of multi-column rows (a separator inside a string, infinities, NULL, '') and key hashes."""
    site = crr.Site()
    site.execute("CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, s VARCHAR, t TIMESTAMP)")
    rows = [(1, "a|b", "infinity"), (2, None, "-infinity"), (3, "", None)]
    site.execute("INSERT INTO r VALUES (1, 'a|b', 'infinity'), (2, NULL, '-infinity'), (3, '', NULL)")
    pinned = {1: 183538311461399340008267936607254302544, 2: 29637621963247191061974373652272508392,
              3: 111437320576247939514817387344161585820}
    assert {k: monos[0][0] for (k, *_), monos in site.provenance("r").items()} == pinned
    rel = site.relation("r")
    assert {row[0]: tuple_id("r", rel.columns, row) for row in rows} == pinned
    assert [key_hash("r", rel.key_columns, [k]) for k in (1, 2, 3)] == [
        152432621465245908629930553527004229326, 103511952226472747721504233312693138953,
        130134870273895570464085234627416745824]


def test_ids_are_the_same_in_another_process() -> None:
    """Ids do not depend on the process (no hash seed, no per-run state)."""
    script = textwrap.dedent("""
        import crr
        s = crr.Site()
        s.execute("CREATE REPLICATED TABLE v (x TIMESTAMP)")
        s.execute("INSERT INTO v VALUES ('infinity')")
        print(*[m[0] for ms in s.provenance("v").values() for m in ms])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert int(out) == next(i for t, entries in PINNED for lit, _, i in entries if t == "TIMESTAMP" and lit == "'infinity'")


# (type, values only site a inserts, values only site b inserts): all pairwise distinct
CONVERGE = [
    ("TIMESTAMP", ["'infinity'", "NULL"], ["'-infinity'", "TIMESTAMP '9999-12-31 23:59:59.999999'"]),
    ("TIMESTAMPTZ", ["'infinity'"], ["'-infinity'", "NULL"]),
    ("DATE", ["'infinity'", "DATE '9999-12-31'"], ["'-infinity'", "NULL"]),
    ("BOOLEAN", ["false"], ["NULL", "true"]),
    ("DOUBLE", ["'nan'", "'inf'"], ["'-inf'", "NULL", "0.0"]),
    ("DECIMAL(3,3)", ["-0.5"], ["0.5", "0"]),
    ("TIME", ["'24:00:00'"], ["'00:00:00'"]),
    ("VARCHAR", ["''"], ["NULL", "'N'"]),
    ("BLOB", ["''::BLOB"], ["NULL", "'\\x00'::BLOB"]),
]


def _exchange(a: crr.Site, b: crr.Site) -> None:
    ab, ba = a.changes(), b.changes()
    b.merge(ab.to_bytes())
    a.merge(ba.to_bytes())


def test_sites_holding_different_special_values_converge_to_both() -> None:
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for i, (type_, only_a, only_b) in enumerate(CONVERGE):
        for site, values in ((a, only_a), (b, only_b)):
            site.execute(f"CREATE REPLICATED TABLE t{i} (x {type_})")
            for v in values:  # one statement each (mixed literals: see test_insert_mixing_special_text_values_with_typed_literals)
                site.execute(f"INSERT INTO t{i} VALUES ({v})")
    _exchange(a, b)
    for i, (type_, only_a, only_b) in enumerate(CONVERGE):
        rows = [s.execute(f"SELECT CAST(x AS VARCHAR) AS x FROM t{i} ORDER BY x NULLS FIRST") for s in (a, b)]
        assert rows[0] == rows[1], type_
        assert len(rows[0]) == len(only_a) + len(only_b), f"{type_}: {rows[0]}"


def test_keyed_rows_differing_only_in_an_infinity_resolve_to_one_version() -> None:
    """Two versions of one key that differ only in the sign of an infinity are distinct tuples: last
    writer wins on both sites (with equal ids each site would keep its own value forever)."""
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for s in (a, b):
        s.execute("CREATE REPLICATED TABLE k (n INTEGER PRIMARY KEY, since TIMESTAMP, until TIMESTAMPTZ)")
    a.execute("INSERT INTO k VALUES (1, '-infinity', 'infinity')")
    b.execute("INSERT INTO k VALUES (1, 'infinity', '-infinity')")
    _exchange(a, b)
    rows = [s.execute("SELECT n, CAST(since AS VARCHAR), CAST(until AS VARCHAR) FROM k") for s in (a, b)]
    assert rows[0] == rows[1] and len(rows[0]) == 1
    assert rows[0][0][1:] in (("-infinity", "infinity"), ("infinity", "-infinity"))


def test_insert_mixing_special_text_values_with_typed_literals() -> None:
    """Plain DuckDB takes this INSERT (it casts each row to the column types)."""
    site = crr.Site()
    site.execute("CREATE REPLICATED TABLE v (x TIMESTAMP)")
    site.execute("INSERT INTO v VALUES ('infinity'), (TIMESTAMP '9999-12-31 23:59:59.999999')")
    assert site.execute("SELECT CAST(x AS VARCHAR) FROM v ORDER BY 1") == [("9999-12-31 23:59:59.999999",), ("infinity",)]
