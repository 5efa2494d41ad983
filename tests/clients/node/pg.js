// node-postgres: the recipes of docs/clients/node.md, run against a server with the extension.
'use strict';
const pg = require('pg');
const { assert, increasing, numberTraps } = require('./check');

const customers = Array.from({ length: 1000 }, (_, i) => `customer ${i}`);

async function main() {
  const client = new pg.Client(); // PGHOST, PGDATABASE, ... from the environment
  await client.connect();
  // region: schema
  await client.query(`
    CREATE TABLE orders (
      id bigint PRIMARY KEY DEFAULT snowflake_nextval(4),
      customer text NOT NULL
    )`);
  // endregion

  // region: insert
  const { rows: [{ id }] } = await client.query(
    'INSERT INTO orders (customer) VALUES ($1) RETURNING id', ['ada']);
  // id is a string, such as '382718766577889280': keep it one, or BigInt(id); never Number(id)
  // endregion
  assert.equal(typeof id, 'string');
  const stored = await client.query("SELECT id FROM orders WHERE customer = 'ada'");
  assert.equal(stored.rows[0].id, id, 'key read back vs stored');

  // region: batch
  const { rows } = await client.query(
    'INSERT INTO orders (customer) SELECT unnest($1::text[]) RETURNING id', [customers]);
  const ids = rows.map((row) => BigInt(row.id)); // BigInt: exact, for comparing and arithmetic
  // endregion
  increasing(ids, customers.length, 'INSERT ... SELECT unnest($1) RETURNING id');
  const all = await client.query("SELECT id FROM orders WHERE customer <> 'ada' ORDER BY id");
  assert.deepEqual(ids, all.rows.map((row) => BigInt(row.id)), 'batch keys vs stored');

  // region: decode
  const { rows: [parts] } = await client.query(
    'SELECT (snowflake_decode(id)).* FROM orders WHERE id = $1', [id]);
  // parts.ts a Date (milliseconds suffice), parts.shard and parts.seq numbers
  // endregion
  const sql = await client.query(
    'SELECT snowflake_shard($1) AS shard, snowflake_seq($1) AS seq, ' +
    '(extract(epoch FROM snowflake_timestamp($1)) * 1000)::bigint AS ms', [id]);
  assert.equal(parts.shard, 4);
  assert.equal(parts.seq, sql.rows[0].seq);
  assert.equal(parts.ts.getTime(), Number(sql.rows[0].ms), 'decoded timestamp');

  // region: json
  const body = JSON.stringify({ id, customer: 'ada' }); // the ID as text: every digit kept
  // endregion
  assert.equal(JSON.parse(body).id, id);

  const { rows: [{ token }] } = await client.query(
    "SELECT snowflake_compose(clock_timestamp() + interval '150 ms', 9, 0)::text AS token");
  // region: causal
  // The causality token: the largest ID this client was shown (by any server), a string (say
  // from a request header), or null. Observed first, the new key is above it whatever the
  // two servers' clocks say.
  const seen = token;
  await client.query('SELECT snowflake_observe($1)', [seen]);
  const { rows: [after] } = await client.query(
    'INSERT INTO orders (customer) VALUES ($1) RETURNING id', ['bob']);
  // endregion
  assert.ok(BigInt(after.id) > BigInt(seen), `key ${after.id} above the token ${seen}`);
  const none = await client.query('SELECT snowflake_observe($1) AS observed', [null]);
  assert.equal(none.rows[0].observed, null, 'a null token observes nothing');

  // region: bigint
  pg.types.setTypeParser(pg.types.builtins.INT8, (text) => BigInt(text)); // every int8 a BigInt
  // endregion
  const asBigInt = await client.query('SELECT id FROM orders WHERE id = $1', [id]);
  assert.equal(asBigInt.rows[0].id, BigInt(id), 'int8 read as BigInt');
  await client.end();

  const traps = numberTraps(all.rows.map((row) => String(row.id)));
  console.log(`pg ${require('pg/package.json').version}: 1 key and ${ids.length} batch keys read ` +
    `back as stored, increasing; decoded shard 4; JSON as text keeps every digit; ` +
    `Number(id) changes ${traps.byNumber} of ${ids.length} IDs (${traps.distinct} distinct numbers left), JSON.parse of the number ` +
    `${traps.byJson}; JSON.stringify throws on a BigInt; a key written after a token 150 ms ahead is above it`);
}

main().catch((err) => { console.error(err); process.exit(1); });
