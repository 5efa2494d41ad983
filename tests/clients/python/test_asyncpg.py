"""asyncpg: the recipes of docs/clients/python.md, run against a server with the extension."""
import asyncio
import json

import asyncpg

from check import doubles_changed, increasing, same

customers = [f"customer {i}" for i in range(1000)]


async def main():
    conn = await asyncpg.connect()  # PGHOST, PGDATABASE, ... from the environment
    # region: schema
    await conn.execute("""
        CREATE TABLE orders (
            id bigint PRIMARY KEY DEFAULT snowflake_nextval(4),
            customer text NOT NULL
        )""")
    # endregion

    # region: insert
    order_id = await conn.fetchval(
        "INSERT INTO orders (customer) VALUES ($1) RETURNING id", "ada")  # an int
    # endregion
    same(type(order_id), int, "type of the key")
    same(await conn.fetchval("SELECT id FROM orders WHERE customer = 'ada'"), order_id,
         "key read back vs stored")

    # region: batch
    rows = await conn.fetch(
        "INSERT INTO orders (customer) SELECT unnest($1::text[]) RETURNING id", customers)
    batch_ids = [row["id"] for row in rows]  # executemany() returns nothing: one INSERT instead
    # endregion
    increasing(batch_ids, len(customers), "INSERT ... SELECT unnest($1) RETURNING id")
    stored = [r[0] for r in await conn.fetch(
        "SELECT id FROM orders WHERE customer <> 'ada' ORDER BY id")]
    same(batch_ids, stored, "batch keys read back vs stored")

    # region: decode
    row = await conn.fetchrow(
        "SELECT (snowflake_decode(id)).* FROM orders WHERE id = $1", order_id)
    ts, shard, seq = row["ts"], row["shard"], row["seq"]  # a datetime (UTC), two ints
    record = await conn.fetchval("SELECT snowflake_decode($1)", order_id)
    # record: snowflake_parts, typed: record["ts"] a datetime, record["shard"] the shard
    # endregion
    same((ts, shard, seq), tuple(await conn.fetchrow(
        "SELECT snowflake_timestamp($1), snowflake_shard($1), snowflake_seq($1)", order_id)),
        "decoded parts vs the scalar decoders")
    same(shard, 4, "decoded shard")
    same((record["ts"], record["shard"], record["seq"]), (ts, shard, seq), "unexpanded decode record")

    # region: json
    body = json.dumps({"id": str(order_id), "customer": "ada"})  # the ID as text
    parts = json.loads(await conn.fetchval("SELECT snowflake_json($1)", order_id))
    # asyncpg hands jsonb over as a str: parse it, or set a type codec
    # endregion
    same(json.loads(body)["id"], str(order_id), "ID through JSON as text")
    same(int(parts["id"]), order_id, "snowflake_json's id")
    same(parts["shard"], 4, "snowflake_json's shard")
    changed = doubles_changed(batch_ids)
    if changed == 0:
        raise AssertionError("as doubles, no ID changed: the trap the docs state did not show")
    await conn.close()
    print(f"asyncpg {asyncpg.__version__}: 1 key and {len(batch_ids)} batch keys read back as "
          f"stored, increasing; decoded shard {shard}; unexpanded record typed; JSON as text "
          f"keeps every digit; as doubles {changed} of {len(batch_ids)} IDs change")


asyncio.run(main())
