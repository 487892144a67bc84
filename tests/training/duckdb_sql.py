"""Runs a SQL file with DuckDB (the delta extension loaded from its wheel, never downloaded)
and prints the result as JSON: a list of rows, each a dict of column -> value.

Usage: duckdb_sql.py QUERY.sql
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "delta"))
from read_table import duckdb_connect  # noqa: E402


def plain(value):
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float) or value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return str(value)


def main():
    sql = Path(sys.argv[1]).read_text()
    con = duckdb_connect()
    cursor = con.execute(sql)
    names = [d[0] for d in cursor.description]
    rows = [{n: plain(v) for n, v in zip(names, row)} for row in cursor.fetchall()]
    json.dump(rows, sys.stdout)


if __name__ == "__main__":
    main()
