"""psycopg 3 on a server in the js53 layout: the recipe of docs/clients/python.md ("With the js53
layout"), IDs as plain numbers end to end, through JSON, also for a reader that takes JSON
numbers as doubles (as JavaScript does)."""
import json

import psycopg

from check import increasing, same

customers = [f"customer {i}" for i in range(1000)]

with psycopg.connect("", autocommit=True) as conn:  # PGHOST, PGDATABASE, ... from the environment
    same(conn.execute("SHOW snowflake_id.id_bits").fetchone()[0], "53", "the server runs the js53 layout")
    conn.execute("""
        CREATE TABLE orders (
            id bigint PRIMARY KEY DEFAULT snowflake_nextval(4),
            customer text NOT NULL
        )""")

    # region: js53
    # Where snowflake_id.layout = 'js53' every ID is at most 2^53 - 1: a JSON number that
    # JavaScript, and any parser reading numbers as doubles, keeps exactly.
    order_id = conn.execute(
        "INSERT INTO orders (customer) VALUES (%s) RETURNING id", ["ada"]
    ).fetchone()[0]
    body = json.dumps({"id": order_id, "customer": "ada"})  # {"id": 1425..., ...}
    # endregion
    same(type(order_id), int, "type of the key")
    text = conn.execute("SELECT id::text FROM orders WHERE id = %s", [order_id]).fetchone()[0]
    same(str(order_id), text, "the number read vs the stored ID, digit by digit")
    same(body, f'{{"id": {text}, "customer": "ada"}}', "the body carries the ID as a number")
    same(json.loads(body)["id"], order_id, "json.loads of the body")
    as_double = json.loads(body, parse_int=float)["id"]
    same(int(as_double), order_id, "the body read as a double, as JavaScript reads it")

    # The server's own JSON, read as doubles: the same number.
    server_json = conn.execute("SELECT snowflake_json(%s)::text", [order_id]).fetchone()[0]
    same(int(json.loads(server_json, parse_int=float)["id"]), order_id, f"snowflake_json: {server_json}")

    # A batch, through JSON read as doubles: every ID the stored one.
    batch_ids = [r[0] for r in conn.execute(
        "INSERT INTO orders (customer) SELECT unnest(%s::text[]) RETURNING id", [customers]).fetchall()]
    increasing(batch_ids, len(customers), "INSERT ... SELECT unnest(%s) RETURNING id")
    stored = [r[0] for r in conn.execute(
        "SELECT id::text FROM orders WHERE customer <> 'ada' ORDER BY id").fetchall()]
    round_trip = [str(int(x)) for x in json.loads(json.dumps(batch_ids), parse_int=float)]
    same(round_trip, stored, "batch through JSON read as doubles vs stored")

print(f"psycopg {psycopg.__version__} on js53: 1 key and {len(batch_ids)} batch keys read as ints, "
      "every digit the stored one through json.dumps and json.loads reading numbers as doubles, "
      "and snowflake_json read alike")
