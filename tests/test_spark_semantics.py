"""A DuckDB query keeps its meaning on Spark: date differences counting boundaries, days of the week, ISO weeks
and GROUPING of several columns give DuckDB's own values (real DuckDB, in SQLMesh's venv, is the oracle)."""

from __future__ import annotations

import json
import subprocess

import pytest

from incremental_assets.load.macros.evaluator import MacroContext
from incremental_assets.load.query import parse_model_body

from sqlmesh_venv import sqlmesh_python, text_rows

pytestmark = [pytest.mark.sqlmesh]

PAIRS = [
    ("2024-01-01 09:00:00", "2024-01-05 00:00:00"),
    ("2024-01-02 23:30:00", "2024-01-05 00:10:00"),
    ("2023-12-31 23:59:59", "2024-03-01 00:00:00"),
    ("2024-02-29 12:00:00", "2024-02-25 08:00:00"),  # backwards: negative
    ("2024-01-07 10:00:00", "2024-01-08 10:00:00"),  # a Sunday, then a Monday
]
QUERY = """
SELECT
  a, b,
  DATE_DIFF('day', a, b) AS days,
  DATE_DIFF('hour', a, b) AS hours,
  DATE_DIFF('minute', a, b) AS minutes,
  DATE_DIFF('month', a, b) AS months,
  DATE_DIFF('year', a, b) AS years,
  DATE_DIFF('day', CAST(a AS DATE), CAST(b AS DATE)) AS date_days,
  DAYOFWEEK(a) AS dow,
  ISODOW(a) AS isodow,
  DATE_PART('dow', a) AS part_dow,
  DATE_PART('isodow', a) AS part_isodow,
  EXTRACT(dow FROM a) AS extract_dow,
  WEEK(a) AS week,
  DAYNAME(a) AS day_name,
  MONTHNAME(b) AS month_name,
  EPOCH(a) AS epoch,
  EXTRACT(epoch FROM b) AS extract_epoch,
  REGEXP_FULL_MATCH(CAST(a AS TEXT), '2024-0[12].*') AS full_match
FROM t
"""
AGGREGATE = (
    "SELECT QUANTILE_CONT(DATE_DIFF('hour', a, b), 0.25) AS q1, QUANTILE_CONT(DATE_DIFF('hour', a, b), 0.5) AS q2 "
    "FROM t"
)
ROLLUP = "SELECT g, h, COUNT(*) AS n, GROUPING(g, h) AS gid, GROUPING(g) AS gg FROM t2 GROUP BY ROLLUP (g, h)"
GROUPS = [("x", "p"), ("x", "q"), ("y", "p")]

DUCKDB = """
import duckdb, json, sys
pairs, groups, query, rollup, aggregate = json.loads(sys.stdin.read())
c = duckdb.connect()
c.execute("CREATE TABLE t (a TIMESTAMP, b TIMESTAMP)")
c.executemany("INSERT INTO t VALUES (?, ?)", pairs)
c.execute("CREATE TABLE t2 (g TEXT, h TEXT)")
c.executemany("INSERT INTO t2 VALUES (?, ?)", groups)
print(json.dumps([c.execute(q).fetchall() for q in (query, rollup, aggregate)], default=str))
"""


def test_duckdb_functions_give_duckdb_s_values_on_spark(spark):
    python = sqlmesh_python()
    done = subprocess.run(
        [str(python), "-c", DUCKDB],
        input=json.dumps([PAIRS, GROUPS, QUERY, ROLLUP, AGGREGATE]),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    theirs, theirs_rollup, theirs_aggregate = json.loads(done.stdout)

    spark.createDataFrame(PAIRS, "a string, b string").selectExpr(
        "CAST(a AS TIMESTAMP) AS a", "CAST(b AS TIMESTAMP) AS b"
    ).createOrReplaceTempView("t")
    spark.createDataFrame(GROUPS, "g string, h string").createOrReplaceTempView("t2")
    ours = spark.sql(parse_model_body(QUERY, dialect="duckdb").query.sql("spark")).collect()
    ours_rollup = spark.sql(parse_model_body(ROLLUP, dialect="duckdb").query.sql("spark")).collect()

    assert text_rows(ours) == text_rows(theirs)
    assert text_rows(ours_rollup) == text_rows(theirs_rollup)
    ours_aggregate = spark.sql(parse_model_body(AGGREGATE, dialect="duckdb").query.sql("spark")).collect()
    assert text_rows(ours_aggregate) == text_rows(theirs_aggregate)


# Rows with a Monday January 1st, a Sunday December 31st, a leap day, a Sunday early in January (ISO week 53 of
# the year before), a date before DuckDB's bucket origin (2000-01-03), a zero divisor and NULLs everywhere.
ROWS = [
    ("2024-01-01 00:05:06.123456", "2024-01-01", 7, 2, "a,b", "10.00"),
    ("2023-12-31 13:00:00", "2023-12-31", -7, 2, "x", "-10.00"),
    ("2020-02-29 09:30:00", "2020-02-29", 5, 3, "", "1.25"),
    ("2021-01-03 12:00:00", "2021-01-03", 1, 0, "é,ü,ß", "0.01"),
    ("1999-12-31 23:52:00", "1999-12-31", 9, 4, "a,,b", "99999999.99"),
    (None, None, None, None, None, None),
]
TABLE = "t3 (ts TIMESTAMP, d DATE, x INTEGER, y INTEGER, s TEXT, dec DECIMAL(10, 2))"
LISTS = (
    "SELECT s, LEN(s) AS chars, LENGTH(s) AS chars2, LEN([1, 2, 3]) AS three, LEN(STRING_SPLIT(s, ',')) AS parts, "
    "LENGTH(LIST_VALUE(x, y)) AS pair, ARRAY_LENGTH(STRING_SPLIT(s, ',')) AS parts2, "
    "LEN(CAST(NULL AS INT[])) AS none FROM t3"
)
DIVISION = (
    "SELECT x, y, dec, x / NULLIF(y, 0) AS q, x // y AS i, x // (y * 0) AS by_zero, dec / 3 AS dq, "
    "CAST(dec AS DECIMAL(38, 2)) / 7 AS wide, CAST(dec AS DECIMAL(10, 2)) // 3 AS di, x / 2.5 AS f, "
    "7.5 // 2 AS literal, x / y AS raw, x / (y * 0) AS infinite, (x - x) / (y * 0) AS nan, "
    "dec / (y * 0) AS dec_infinite, CAST(dec AS DECIMAL(10, 2)) // (y * 0) AS dec_null, x / 0 AS by_literal_zero, "
    "x % y AS remainder, x % 3 AS by_three "
    "FROM t3"
)
BUCKETS = (
    "SELECT ts, TIME_BUCKET(INTERVAL '15 minutes', ts) AS m15, TIME_BUCKET(INTERVAL '2 hours', ts) AS h2, "
    "TIME_BUCKET(INTERVAL '1 day', ts) AS d1, TIME_BUCKET(INTERVAL '10 days', ts) AS d10, "
    "TIME_BUCKET(INTERVAL '1 week', ts) AS w1, TIME_BUCKET(INTERVAL 2 WEEK, ts) AS w2, "
    "TIME_BUCKET(INTERVAL '1 month', ts) AS mo1, TIME_BUCKET(INTERVAL '3 months', ts) AS q1, "
    "TIME_BUCKET(INTERVAL '1 year', ts) AS y1, TIME_BUCKET(INTERVAL '90 seconds', ts) AS s90, "
    "TIME_BUCKET(INTERVAL '15 minutes', ts, INTERVAL '5 minutes') AS offset_m15, "
    "TIME_BUCKET(INTERVAL '1 day', ts, TIMESTAMP '2024-01-01 06:00:00') AS origin_d1, "
    "TIME_BUCKET(INTERVAL '2 months', ts, TIMESTAMP '2023-12-15 00:00:00') AS origin_mo2, "
    "TIME_BUCKET(INTERVAL '1 month', ts, INTERVAL '2 days') AS offset_mo1, "
    "TIME_BUCKET(INTERVAL '1 week', CAST(d AS DATE)) AS date_w1, "
    "TIME_BUCKET(INTERVAL '1 month', CAST(d AS DATE)) AS date_mo1 FROM t3"
)
TRUNCATIONS = (
    "SELECT ts, DATE_TRUNC('day', ts) AS day, DATE_TRUNC('month', CAST(d AS DATE)) AS date_month, "
    "DATE_TRUNC('day', CAST(d AS DATE)) AS date_day, DATE_TRUNC('week', d) AS week, DATE_TRUNC('hr', ts) AS hr, "
    "DATE_TRUNC('mon', ts) AS mon, DATE_TRUNC('quarters', ts) AS quarters, DATE_TRUNC('decade', ts) AS decade, "
    "DATE_TRUNC('century', d) AS century, DATE_TRUNC('millennium', ts) AS millennium, "
    "DATE_TRUNC('isoyear', ts) AS isoyear, DATE_TRUNC('ms', ts) AS ms FROM t3"
)
DIFFERENCES = (
    "SELECT ts, DATE_DIFF('d', TIMESTAMP '2020-01-05 10:00:00', ts) AS d, DATE_DIFF('hr', d, ts) AS hr, "
    "DATE_DIFF('mons', TIMESTAMP '2020-01-05 10:00:00', ts) AS mons, DATE_DIFF('yr', ts, d) AS yr, "
    "DATE_DIFF('minutes', d, ts) AS minutes, DATE_DIFF('week', TIMESTAMP '2020-01-05 10:00:00', ts) AS week, "
    "DATE_DIFF('w', ts, DATE '2021-01-04') AS w, DATE_DIFF('weeks', d, DATE '2020-01-05') AS weeks FROM t3"
)
YEARWEEKS = "SELECT d, YEARWEEK(d) AS yw, YEARWEEK(ts) AS ywt FROM t3"
FORMATS = (
    "SELECT ts, STRFTIME(ts, '%W|%j|%u|%U|%w|%V|%G|%a|%A|%b|%h|%B|%p|%I|%-I|%-d|%-m|%-j|%-H|%-M|%-S|%-y|%y|%g|%f|%n') "
    "AS weekly, "
    "STRFTIME(ts, '%c|%x|%X|%T|%z|%Z|%%') AS composite, STRFTIME(ts, '%Y-%m-%dT%H:%M:%S') AS iso, "
    "STRFTIME(ts, 'week %W of %Y, it''s [%a] {%d} #%j') AS text, STRFTIME('%d/%m/%Y', d) AS format_first, "
    "STRFTIME(d, 'day') AS only_text FROM t3"
)
PARTS = (
    "SELECT ts, DATE_PART('second', ts) AS s, EXTRACT(second FROM ts) AS es, DATE_PART('millisecond', ts) AS ms, "
    "EXTRACT(microsecond FROM ts) AS us, DATE_PART('dayofyear', ts) AS doy, DATE_PART('doy', d) AS doy2, "
    "DATE_PART('week', ts) AS wk, EXTRACT(weekofyear FROM d) AS wk2, DATE_PART('isoyear', ts) AS iy, "
    "DATE_PART('yearweek', d) AS yw, DATE_PART('decade', ts) AS dc, EXTRACT(century FROM d) AS cen, "
    "DATE_PART('millennium', ts) AS mil, DATE_PART('quarter', ts) AS q, DATE_PART('dayofmonth', d) AS dom, "
    "EXTRACT(minute FROM ts) AS mi, DATE_PART('hour', ts) AS h, DATE_PART('year', d) AS y FROM t3"
)
DATE_ADDS = (
    "SELECT ts, DATE_ADD(d, INTERVAL 7 DAY) AS week_later, DATE_ADD(ts, INTERVAL '2 hours') AS hours, "
    "DATE_ADD(CAST(d AS DATE), INTERVAL 1 MONTH) AS month_later, DATE_ADD(ts, INTERVAL '1 day 30 minutes') AS mixed "
    "FROM t3"
)
# DuckDB's lists keep NULLs and their ORDER BY, and FIRST / LAST take the first (last) row in order, NULL or not.
ORDERED_LISTS = (
    "SELECT LIST(x ORDER BY ts DESC) AS by_ts_desc, LIST(x ORDER BY ts NULLS FIRST) AS nulls_first, "
    "ARRAY_AGG(s ORDER BY y DESC, x) AS by_two, FIRST(s ORDER BY ts) AS first_s, LAST(x ORDER BY d) AS last_x, "
    "ARRAY_AGG(DISTINCT y ORDER BY y DESC) AS distinct_y, LIST(x ORDER BY x) FILTER (WHERE x > 100) AS none_kept, "
    "LIST(y) FILTER (WHERE x IS NULL) AS null_kept FROM t3"
)
# DuckDB's REGEXP_REPLACE: the first match unless 'g', 'i' ignoring case, groups written \\1 and \\0.
REGEXPS = (
    "SELECT s, REGEXP_REPLACE(s, ',', ';') AS first, REGEXP_REPLACE(s, ',', ';', 'g') AS every, "
    "REGEXP_REPLACE(s, '([a-z]),', '<\\1>', 'g') AS grouped, REGEXP_REPLACE(s, 'A', '$', 'i') AS no_case, "
    "REGEXP_REPLACE(s, '^(.)', '\\0\\0\\\\') AS whole, REGEXP_REPLACE(s, '', '-') AS empty, "
    "REGEXP_REPLACE(s, '(ü|b)', '[\\1]1', 'g') AS digit_after, REGEXP_REPLACE(s, 'B', '_', 'ic') AS cased FROM t3"
)
EPOCHS = "SELECT ts, EPOCH(ts) AS epoch, EXTRACT(epoch FROM d) AS date_epoch FROM t3"  # DOUBLE seconds
# DuckDB rounds a DOUBLE cast to an integer half to even, a DECIMAL half away from zero.
INTEGER_CASTS = (
    "SELECT x, CAST(x / 2 AS INTEGER) AS half, CAST(CAST(x AS DECIMAL(5, 1)) * 0.5 AS INTEGER) AS dec_half, "
    "CAST(CAST(x AS DOUBLE) / 4 AS BIGINT) AS quarter, (x / 2)::SMALLINT AS colon, TRY_CAST(x / 3 AS INT) AS third, "
    "CAST(x AS BIGINT) AS same, CAST(2.5 AS INT) AS literal_half, CAST(-2.5 AS INT) AS literal_neg, "
    "CAST(CAST(x AS INT) * 0.5 AS INT) AS times_decimal FROM t3"
)
MATCHES = (  # REGEXP_MATCHES' options: i ignores case (c after it does not), s lets . match a newline
    "SELECT s, REGEXP_MATCHES(s, '^A', 'i') AS matches_i, REGEXP_MATCHES(s, 'B', 'ic') AS matches_c, "
    "REGEXP_MATCHES(s || CHR(10) || 'x', 'b.X', 'si') AS matches_s, REGEXP_MATCHES(s, 'b') AS plain FROM t3"
)
TILDES = (  # DuckDB's ~ and SIMILAR TO match the whole text
    "SELECT s, s ~ 'a.*' AS whole, s ~ 'b' AS part, s !~ 'a.*' AS negated, s SIMILAR TO 'x' AS similar, "
    "(s) ~ ('.*b') AS parenthesized, s::TEXT ~ '.*,.*' AS cast_first, ~y AS bitwise_not, 1 + ~y AS after_plus FROM t3"
)
FORMATS_FMT = (  # DuckDB's FORMAT: fmt's {} placeholders, NULL when an argument is NULL
    "SELECT s, FORMAT('{}-{} %', x, s) AS both, FORMAT('{{}} {}', y) AS braces, FORMAT('{}', CAST(x AS DOUBLE) / 2) "
    "AS half, FORMAT('no args') AS plain FROM t3"
)
# DuckDB's functions that Spark names otherwise or lacks (an accent written as a combining mark, lists with NULLs,
# indexes at 0, negative and out of range, a division by zero for ISINF).
SCALARS = (
    "SELECT s, PREFIX(s, 'a') AS prefix, SUFFIX(s, 'b') AS suffix, STRLEN(s) AS bytes, "
    "LENGTH_GRAPHEME(s || 'e\u0301') AS graphemes, ORD(s) AS ord, EVEN(x / 2) AS even_half, EVEN(dec) AS "
    "even_dec, ROUND_EVEN(dec, 1) AS round_even, ISINF(x / y) AS inf, ISFINITE(x / y) AS finite FROM t3"
)
LIST_FUNCTIONS = (
    "SELECT s, LIST_REVERSE(STRING_SPLIT(s, ',')) AS rev, ARRAY_REVERSE([x, y]) AS rev2, "
    "LIST_EXTRACT(STRING_SPLIT(s, ','), 2) AS second, LIST_ELEMENT([x, y], -1) AS last, ARRAY_EXTRACT([x, y], 0) "
    "AS zeroth, [x, y, NULL][y] AS by_y, STRING_SPLIT(s, ',')[1] AS first, [x, y][5] AS out, [x, y][-2] AS "
    "from_end, LIST_POSITION([x, y], 2) AS pos, ARRAY_POSITION([x, y], 99) AS absent, LIST_COUNT([x, NULL, y]) AS "
    "count, LIST_UNIQUE([x, y, y, NULL]) AS uniq, LIST_STRING_AGG(STRING_SPLIT(s, ',')) AS joined, "
    "LIST_APPLY([x, y], e -> e * 2) AS doubled FROM t3"
)
TIME_FUNCTIONS = (
    "SELECT ts, MILLISECOND(ts) AS ms, MICROSECOND(ts) AS us, NANOSECOND(ts) AS ns, DECADE(d) AS dec, CENTURY(ts) "
    "AS cen, MILLENNIUM(d) AS mil, ISOYEAR(d) AS iy, EPOCH_US(ts) AS eus, EPOCH_NS(ts) AS ens, DATE_SUB('month', "
    "d, ts) AS months, DATE_SUB('hour', TIMESTAMP '2020-01-01 10:30:00', ts) AS hours, DATESUB('day', d, "
    "DATE '2024-01-01') AS days FROM t3"
)
# DuckDB's + and - of a DATE the query shows: with an INTERVAL a TIMESTAMP, less a DATE a number of days.
DATE_ARITHMETIC = (
    "SELECT ts, CAST(ts AS DATE) - CAST(d AS DATE) AS same_day, CAST(d AS DATE) - DATE '2020-01-01' AS since, "
    "CURRENT_DATE - CURRENT_DATE AS zero, CAST(ts AS DATE) + INTERVAL 1 DAY AS next_day, INTERVAL '2 hours' + "
    "CAST(d AS DATE) AS two_hours, CAST(d AS DATE) - INTERVAL 1 MONTH AS month_before, DATE '2020-01-01' + 3 AS "
    "plus_days, ts - INTERVAL 90 MINUTE AS ts_back FROM t3"
)
# DuckDB's LOG is to base 10; CONCAT writes numbers, decimals and dates as text; GLOB matches the whole text; a text
# the query shows is indexed and sliced by character, a list from STRING_SPLIT sliced from 1.
TEXT_AND_SLICES = (
    "SELECT s, LOG(ABS(x) + 1) AS log10, LOG(2, ABS(x) + 1) AS log2, CONCAT(s, '-', x, dec, d) AS joined, "
    "s GLOB 'a*' AS glob_a, s GLOB '[!a]*' AS glob_not_a, s GLOB '?' AS one, LIST_HAS_ANY([x, y], [2, 3]) AS "
    "any_of, LIST_HAS_ANY([x, NULL], [NULL]) AS nulls, LIST_SLICE([x, y, 3], 2, 3) AS tail, LIST_SLICE([x, y, 3], "
    "-2, -1) AS from_end, ARRAY_SLICE(STRING_SPLIT(s, ','), 2, 10) AS rest, 'abcdef'[2] AS literal_char, "
    "UPPER(s)[1] AS first_upper, 'abcdef'[-2:] AS literal_slice, STRING_SPLIT(s, ',')[2:] AS parts_after FROM t3"
)
# DuckDB's LEFT/RIGHT of a negative count, TRY_STRPTIME, intervals of expressions (INTERVAL (n) DAY, TO_HOURS),
# COUNT(DISTINCT ...) over a window and RANK / ROW_NUMBER over one without an order (Spark refuses both), and
# REGEXP_SPLIT_TO_ARRAY.
INTERVALS_AND_WINDOWS = (
    "SELECT ts, LEFT(s, -1) AS all_but_last, RIGHT(s, x - 6) AS by_count, TRY_STRPTIME(s, '%Y') AS bad_text, "
    "TRY_STRPTIME(CAST(d AS VARCHAR), '%Y-%m-%d') AS parsed, ts + TO_HOURS(x) AS hours, d + TO_DAYS(x) AS days, "
    "ts + TO_MONTHS(y) AS months, ts - INTERVAL (y * 2) HOUR AS by_expr, ts + INTERVAL (3) DAY AS parenthesized, "
    "COUNT(DISTINCT y) OVER () AS ys, QUANTILE_DISC(x, 0.75) OVER () AS q75, "
    "COUNT(DISTINCT s) OVER (PARTITION BY y) AS per_y, REGEXP_SPLIT_TO_ARRAY(s, ',+') AS parts, RANK() OVER () AS "
    "all_peers, DENSE_RANK() OVER (PARTITION BY y) AS peers_y, ROW_NUMBER() OVER () > 0 AS numbered FROM t3"
)
# DuckDB's QUANTILE is discrete, as QUANTILE_DISC; SKEWNESS and KURTOSIS are the sample statistics; COUNT() counts rows.
AGGREGATES = (
    "SELECT QUANTILE_DISC(x, 0.9) AS disc, QUANTILE(x, 0.3) AS q30, QUANTILE(y, 0.5) FILTER (WHERE x > 0) AS filtered, "
    "SKEWNESS(x) AS skew, KURTOSIS(x) AS kurt, KURTOSIS(y) AS kurt_y, "
    "COUNT() AS n, PRODUCT(y) AS product, PRODUCT(CAST(dec AS DOUBLE)) AS dec_product, FSUM(x) AS fsum, "
    "FAVG(dec) AS favg FROM t3"
)
# Columns whose type only the table's declared columns show: a DATE column less a DATE is a number of days, plus
# an INTERVAL of hours a TIMESTAMP; a DOUBLE (here a CTE's x / 4) cast to an integer rounds half to even, a DECIMAL half
# away from zero; LEN of a list column counts its elements; l[i] of an integer column counts from 1; a text
# column's s[i] is a character and s[a:b] / l[a:b] slices from 1, both ends kept; EPOCH_MS of a time is its
# milliseconds; an INT times a number written with a point is a DECIMAL (cast to an integer: half away from zero).
TYPED_COLUMNS = (
    "WITH f AS (SELECT x, y, d, dec, s, x / 4 AS ratio, [x, y] AS pair, CAST(ts AS DATE) AS day FROM t3) "
    "SELECT f.x, f.d - DATE '2020-01-01' AS since, f.d - day AS same_day, f.d + INTERVAL 36 HOUR AS later, "
    "INTERVAL '2 hours' + f.d AS two_hours, CAST(f.dec AS INT) AS dec_int, "
    "CAST(ratio AS INT) AS ratio_int, CAST(ratio * 10 AS BIGINT) AS scaled, LEN(pair) AS pair_len, "
    "pair[f.y] AS by_y, f.d - b.d AS self_gap, CAST(b.dec * 1.5 AS INT) AS joined_int, f.s[2] AS second_char, "
    "f.s[-3:] AS last_three, f.s[f.y:f.x] AS chars_y_to_x, f.s[0] AS at_zero, pair[2:] AS tail, pair[:1] AS head, "
    "EPOCH_MS(b.ts) AS ms, EPOCH_MS(f.d) AS day_ms, CAST(f.x * 0.5 AS BIGINT) AS half_up "
    "FROM f JOIN t3 AS b ON f.x = b.x ORDER BY f.x"
)
# DuckDB's SELECT * REPLACE (...), written out from the columns declared (Spark has no REPLACE).
REPLACING_STARS = (
    "WITH w AS (SELECT * EXCLUDE (ts) REPLACE (x * 2 AS x, s || '!' AS s) FROM t3) "
    "SELECT w.* REPLACE (w.d - DATE '2020-01-01' AS d), t.ts FROM w JOIN t3 AS t ON w.y = t.y AND w.dec = t.dec"
)
# DuckDB's list aggregates (a sum keeps integers and a DECIMAL's scale; NULL for a list without values), and
# what gives NULL or false in DuckDB where Spark's function gives otherwise: LIST_CONTAINS of a list holding
# NULLs, ARRAY_TO_STRING of NULLs only, PRINTF and ISNAN of NULL.
LIST_AGGREGATES = (
    "SELECT LIST_SUM([x, y]) AS sum_xy, LIST_SUM([dec, dec]) AS sum_dec, LIST_SUM(LIST_VALUE(CAST(x AS DOUBLE), y)) "
    "AS sum_d, LIST_AVG([x, y]) AS avg_xy, LIST_PRODUCT([x, y]) AS product_xy, LIST_AGGREGATE([x, y], 'max') AS "
    "max_xy, LIST_AGGREGATE([s, s], 'string_agg') AS joined_s, LIST_AGGREGATE([x, NULL], 'count') AS n, "
    "LIST_SUM([]::INT[]) AS empty_sum, ARRAY_HAS([x, y], 2) AS has_two, LIST_CONTAINS([x, NULL], 7) AS has_seven, "
    "ARRAY_TO_STRING([s, NULL], '-') AS s_dash, ARRAY_TO_STRING([x, y], '-') AS xy_dash, LIST_STRING_AGG([s, s]) "
    "AS ss, PRINTF('%s-%d', s, y) AS printed, ISNAN(x / 2) AS nan FROM t3"
)
# DuckDB's JSON: `->` keeps a text's quotes and a JSON null, a text cast to JSON stays that text, a struct's or a
# list's JSON keeps NULLs, JSON_ARRAY_LENGTH with a path, JSON_VALID.
JSON = (
    'WITH j AS (SELECT x, s, \'{"a": \' || x || \', "b": "\' || s || \'", "c": [1, \' || y || \'], "d": '
    '{"e": \' || y || \'}, "g": null}\' AS doc FROM t3) '
    "SELECT doc->'b' AS b_json, doc->>'b' AS b_text, doc->'g' AS null_json, doc->'d'->'e' AS e, doc->'c'->>1 AS c1, "
    "JSON_EXTRACT(doc, '$.c') AS c, CAST(doc AS JSON)->>'a' AS a, doc::JSON AS same, {'x': x, 'l': [x]}::JSON AS "
    "packed, TO_JSON({'s': s}) AS s_json, JSON_OBJECT('x', x) AS object, JSON_ARRAY(x, s) AS array, "
    "JSON_ARRAY_LENGTH(doc, '$.c') AS n, JSON_VALID(doc) AS valid, JSON_VALID(s) AS s_valid FROM j"
)
# DuckDB's range / generate_series as tables (a date spine: TIMESTAMPs; range leaves out its end; empty when the
# start lies past the end) and as lists.
SERIES = (
    "SELECT spine.day, COUNT(t3.x) AS n, r.range AS k, (SELECT COUNT(*) FROM range(3, 1)) AS none, "
    "(SELECT COUNT(*) FROM range(TIMESTAMP '2024-01-01', TIMESTAMP '2024-01-02', INTERVAL 6 HOUR)) AS quarters, "
    "LEN(generate_series(1, 3)) AS three "
    "FROM generate_series(DATE '2020-02-27', DATE '2020-03-01', INTERVAL 1 DAY) AS spine(day) "
    "LEFT JOIN t3 ON t3.d = spine.day CROSS JOIN range(2) AS r GROUP BY spine.day, r.range"
)
# DuckDB's UNION BY NAME: columns matched by name (case aside), NULL where a side lacks one; a SELECT * side
# needs its table's columns declared.
UNIONS_BY_NAME = (
    "SELECT s, COUNT(*) AS n, COUNT(x) AS xs, COUNT(k) AS ks FROM (SELECT x AS X, s FROM t3 UNION ALL BY NAME "
    "SELECT 'k' AS k, y AS x FROM t3 UNION BY NAME SELECT s FROM t3) GROUP BY s"
)
STAR_UNIONS_BY_NAME = "SELECT * FROM t3 UNION ALL BY NAME SELECT x, 'n' AS k FROM t3"
# DuckDB's UNNEST inside an expression (Spark takes a generator only as a projection of its own).
NESTED_UNNESTS = (
    "SELECT x, UNNEST(STRING_SPLIT(s, ',')) || '!' AS part, LEN(s) AS n FROM t3 WHERE x > 0 "
    "UNION ALL SELECT x, UNNEST([d, ts::DATE])::VARCHAR, y FROM t3"
)
# Queries that need the table's declared columns.
DECLARED_ONLY = {"typed_columns", "replacing_stars", "star_unions_by_name"}
# The Spark types of t3's columns as a project declares them (a source's ``columns``).
T3_COLUMNS = {"ts": "timestamp", "d": "date", "x": "int", "y": "int", "s": "string", "dec": "decimal(10,2)"}
FUNCTION_QUERIES = {
    "typed_columns": TYPED_COLUMNS,
    "replacing_stars": REPLACING_STARS,
    "aggregates": AGGREGATES,
    "list_aggregates": LIST_AGGREGATES,
    "json": JSON,
    "series": SERIES,
    "unions_by_name": UNIONS_BY_NAME,
    "nested_unnests": NESTED_UNNESTS,
    "star_unions_by_name": STAR_UNIONS_BY_NAME,
    "intervals_and_windows": INTERVALS_AND_WINDOWS,
    "text_and_slices": TEXT_AND_SLICES,
    "date_arithmetic": DATE_ARITHMETIC,
    "scalars": SCALARS,
    "list_functions": LIST_FUNCTIONS,
    "time_functions": TIME_FUNCTIONS,
    "formats_fmt": FORMATS_FMT,
    "matches": MATCHES,
    "tildes": TILDES,
    "integer_casts": INTEGER_CASTS,
    "epochs": EPOCHS,
    "regexps": REGEXPS,
    "date_adds": DATE_ADDS,
    "ordered_lists": ORDERED_LISTS,
    "parts": PARTS,
    "lists": LISTS,
    "division": DIVISION,
    "buckets": BUCKETS,
    "truncations": TRUNCATIONS,
    "differences": DIFFERENCES,
    "yearweeks": YEARWEEKS,
    "formats": FORMATS,
}

DUCKDB_TYPED = """
import duckdb, json, sys
table, rows, queries = json.loads(sys.stdin.read())
c = duckdb.connect()
c.execute("CREATE TABLE " + table)
c.executemany("INSERT INTO t3 VALUES (?, ?, ?, ?, ?, ?)", rows)
results = []
for q in queries:
    r = c.execute(q)
    results.append([r.fetchall(), [str(d[1]) for d in r.description]])
print(json.dumps(results, default=str))
"""
# The Spark types that hold each DuckDB type the queries above give (integers are left out: Spark's are
# narrower or wider in places).
SPARK_TYPES = {
    "DOUBLE": {"double"},
    "TIMESTAMP": {"timestamp", "timestamp_ntz"},
    "DATE": {"date"},
    "VARCHAR": {"string"},
}


@pytest.fixture(scope="module")
def duckdb_results():
    """Each of FUNCTION_QUERIES' rows and column types in real DuckDB."""
    done = subprocess.run(
        [str(sqlmesh_python()), "-c", DUCKDB_TYPED],
        input=json.dumps([TABLE, ROWS, list(FUNCTION_QUERIES.values())]),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return dict(zip(FUNCTION_QUERIES, json.loads(done.stdout)))


@pytest.mark.parametrize(
    "name, declared",
    [
        (name, declared)
        for name in FUNCTION_QUERIES
        for declared in (True, False)
        if declared or name not in DECLARED_ONLY
    ],
)
def test_duckdb_function_gives_duckdb_s_values_and_types_on_spark(spark, duckdb_results, name, declared):
    """LEN of lists, ``/`` and ``//``, TIME_BUCKET, DATE_TRUNC, YEARWEEK and STRFTIME give the rows and column
    types DuckDB gives, whether the table's column types are declared or not."""
    spark.createDataFrame(ROWS, "ts string, d string, x int, y int, s string, dec string").selectExpr(
        "CAST(ts AS TIMESTAMP) AS ts", "CAST(d AS DATE) AS d", "x", "y", "s", "CAST(dec AS DECIMAL(10, 2)) AS dec"
    ).createOrReplaceTempView("t3")
    query, (rows, types) = FUNCTION_QUERIES[name], duckdb_results[name]
    macros = MacroContext(schemas={"t3": T3_COLUMNS} if declared else {})
    frame = spark.sql(parse_model_body(query, dialect="duckdb", macros=macros).query.sql("spark"))
    assert text_rows(frame.collect()) == text_rows(_typed(rows, types))
    ours = [field.dataType.simpleString() for field in frame.schema.fields]
    kept = [(n, t, o) for n, t, o in zip(frame.columns, types, ours) if t in SPARK_TYPES]
    assert [(n, t, o) for n, t, o in kept if o not in SPARK_TYPES[t]] == []


def _typed(rows, types):
    """DuckDB's rows back from JSON: dates, timestamps and decimals as Python values again."""
    from datetime import date, datetime
    from decimal import Decimal

    def value(cell, kind):
        if cell is None:
            return None
        if kind == "DATE":
            return date.fromisoformat(cell)
        if kind == "TIMESTAMP":
            return datetime.fromisoformat(cell)
        return Decimal(cell) if kind.startswith("DECIMAL") else cell

    return [tuple(value(cell, kind) for cell, kind in zip(row, types)) for row in rows]


@pytest.mark.parametrize(
    "expression, message",
    [
        (
            "TIME_BUCKET(INTERVAL (n) MINUTE, ts)",
            "TIME_BUCKET(INTERVAL (n) MINUTE, ...) needs a constant positive width",
        ),
        ("FORMAT('{:d}', n)", "FORMAT('{:d}', n): a FORMAT other than a constant text of {} placeholders"),
        ("TIME_BUCKET(INTERVAL '1 day', ts, 'Europe/Paris')", "TIME_BUCKET in a time zone (a text argument after"),
        (
            "TIME_BUCKET(INTERVAL '1 day', ts, INTERVAL (n) HOUR)",
            "TIME_BUCKET's offset INTERVAL (n) HOUR is not a constant",
        ),
        ("STRFTIME(ts, fmt)", "STRFTIME with the format fmt, not a constant text, has no Spark translation"),
        ("STRFTIME(ts, '%Y %e')", "STRFTIME specifier %e is not one DuckDB knows"),
    ],
)
def test_duckdb_functions_without_a_spark_equivalent_are_refused_at_load(expression, message):
    from incremental_assets.errors import ModelFileError

    with pytest.raises(ModelFileError) as refused:
        parse_model_body(
            f"SELECT\n  id,\n  {expression} AS v\nFROM t", dialect="duckdb", path="models/m.sql", line_offset=4
        )
    assert str(refused.value).startswith(f"models/m.sql:7: {message}"), str(refused.value)
    assert "(fix: " in str(refused.value)


def test_a_format_spark_writes_alike_stays_a_format_the_analysis_reads():
    from sqlglot import exp

    query = parse_model_body("SELECT STRFTIME(ts, '%Y-%m-%d') AS day FROM t", dialect="duckdb").query
    assert query.find(exp.TimeToStr) is not None
    assert query.sql("spark") == "SELECT DATE_FORMAT(ts, 'yyyy-MM-dd') AS day FROM t"
