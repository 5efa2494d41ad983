"""psycopg 3: the recipes of docs/clients/python.md, run against a server with the extension."""
import json

import psycopg
from psycopg.types.composite import CompositeInfo, register_composite

from check import doubles_changed, increasing, same

customers = [f"customer {i}" for i in range(1000)]

with psycopg.connect("", autocommit=True) as conn:  # PGHOST, PGDATABASE, ... from the environment
    # region: schema
    conn.execute("""
        CREATE TABLE orders (
            id bigint PRIMARY KEY DEFAULT snowflake_nextval(4),
            customer text NOT NULL
        )""")
    # endregion

    # region: insert
    order_id = conn.execute(
        "INSERT INTO orders (customer) VALUES (%s) RETURNING id", ["ada"]
    ).fetchone()[0]  # an int: Python's int keeps all 64 bits
    # endregion
    same(type(order_id), int, "type of the key")
    same(conn.execute("SELECT id FROM orders WHERE customer = 'ada'").fetchone()[0], order_id,
         "key read back vs stored")

    # region: batch
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO orders (customer) VALUES (%s) RETURNING id",
            [(c,) for c in customers],
            returning=True,
        )
        batch_ids = []
        while True:
            batch_ids.append(cur.fetchone()[0])
            if not cur.nextset():
                break
    # endregion
    increasing(batch_ids, len(customers), "executemany(returning=True)")
    stored = [r[0] for r in conn.execute(
        "SELECT id FROM orders WHERE customer <> 'ada' ORDER BY id").fetchall()]
    same(batch_ids, stored, "batch keys read back vs stored")

    # region: decode
    ts, shard, seq = conn.execute(
        "SELECT (snowflake_decode(id)).* FROM orders WHERE id = %s", [order_id]
    ).fetchone()  # a datetime (UTC), two ints
    # endregion
    same((ts, shard, seq), conn.execute(
        "SELECT snowflake_timestamp(%s), snowflake_shard(%s), snowflake_seq(%s)",
        [order_id] * 3).fetchone(), "decoded parts vs the scalar decoders")
    same(shard, 4, "decoded shard")

    # region: decode-typed
    info = CompositeInfo.fetch(conn, "snowflake_parts")
    register_composite(info, conn)  # once per connection (or register it globally)
    parts = conn.execute("SELECT snowflake_decode(%s)", [order_id]).fetchone()[0]
    # parts.ts a datetime (UTC), parts.shard and parts.seq ints: a named tuple
    # endregion
    same((parts.ts, parts.shard, parts.seq), (ts, shard, seq), "typed parts vs expanded")
    same(type(parts).__name__, "snowflake_parts", "the class register_composite made")

    # region: json
    body = json.dumps({"id": str(order_id), "customer": "ada"})  # the ID as text
    parts = conn.execute("SELECT snowflake_json(%s)", [order_id]).fetchone()[0]
    # parts: a dict, {'id': '3827...', 'ts': '2026-...Z', 'shard': 4, 'seq': 0, 'unix_ms': ...}
    # endregion
    same(json.loads(body)["id"], str(order_id), "ID through JSON as text")
    same(int(parts["id"]), order_id, "snowflake_json's id")
    same(parts["shard"], 4, "snowflake_json's shard")
    changed = doubles_changed(batch_ids)
    if changed == 0:
        raise AssertionError("as doubles, no ID changed: the trap the docs state did not show")

    # region: causal
    def write_after(conn, seen, customer):
        # seen: the causality token, the largest ID this client was shown (by any server),
        # or None. Observed first, so the new key is above it whatever the clocks say.
        with conn.transaction():
            conn.execute("SELECT snowflake_observe(%s)", [seen])
            return conn.execute(
                "INSERT INTO orders (customer) VALUES (%s) RETURNING id", [customer]
            ).fetchone()[0]
    # endregion
    # A token from a server whose clock is 150 ms ahead of this one's (shard 9).
    seen = conn.execute(
        "SELECT snowflake_compose(clock_timestamp() + interval '150 ms', 9, 0)").fetchone()[0]
    after = write_after(conn, seen, "after")
    if not after > seen:
        raise AssertionError(f"the key {after} is not above the token {seen}")
    same(conn.execute("SELECT snowflake_observe(NULL)").fetchone()[0], None, "NULL token")
    increasing([after, write_after(conn, None, "no token")], 2, "a write without a token")

print(f"psycopg {psycopg.__version__}: 1 key and {len(batch_ids)} batch keys read back as stored, "
      f"increasing; decoded shard {shard}; JSON as text keeps every digit; "
      f"as doubles {changed} of {len(batch_ids)} IDs change; snowflake_parts read typed; "
      f"a key written after a token 150 ms ahead is above it")
