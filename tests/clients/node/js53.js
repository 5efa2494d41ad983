// node-postgres on a server in the js53 layout: the recipe of docs/clients/node.md ("With the
// js53 layout"), IDs as plain numbers end to end, through JSON.
'use strict';
const pg = require('pg');
const { assert, increasing } = require('./check');

const customers = Array.from({ length: 1000 }, (_, i) => `customer ${i}`);

async function main() {
  const client = new pg.Client(); // PGHOST, PGDATABASE, ... from the environment
  await client.connect();
  const { rows: [{ idBits }] } = await client.query("SELECT current_setting('snowflake_id.id_bits') AS \"idBits\"");
  assert.equal(idBits, '53', 'the server runs the js53 layout');
  await client.query(`
    CREATE TABLE orders (
      id bigint PRIMARY KEY DEFAULT snowflake_nextval(4),
      customer text NOT NULL
    )`);

  // region: js53
  // Only where snowflake_id.layout = 'js53': every ID is at most 2^53 - 1, a plain number.
  pg.types.setTypeParser(pg.types.builtins.INT8, Number);
  const { rows: [{ id }] } = await client.query(
    'INSERT INTO orders (customer) VALUES ($1) RETURNING id', ['ada']);
  const body = JSON.stringify({ id, customer: 'ada' }); // {"id":1425...,"customer":"ada"}
  // endregion
  assert.equal(typeof id, 'number');
  assert.ok(Number.isSafeInteger(id), `${id} is not a safe integer`);
  const { rows: [{ text }] } = await client.query('SELECT id::text AS text FROM orders WHERE id = $1', [id]);
  assert.equal(String(id), text, 'the number read vs the stored ID, digit by digit');
  assert.equal(JSON.parse(body).id, id, 'JSON.parse of the body');
  assert.equal(body, `{"id":${text},"customer":"ada"}`, 'the body carries the ID as a number');

  // The server's own JSON, parsed by JSON.parse: the same number.
  const { rows: [{ json }] } = await client.query('SELECT snowflake_json($1)::text AS json', [id]);
  assert.equal(JSON.parse(json).id, id, `snowflake_json: ${json}`);

  // A batch: every ID read as a number, stringified and parsed back, is the stored one.
  const { rows } = await client.query(
    'INSERT INTO orders (customer) SELECT unnest($1::text[]) RETURNING id', [customers]);
  const ids = rows.map((row) => row.id);
  increasing(ids, customers.length, 'INSERT ... SELECT unnest($1) RETURNING id');
  const stored = await client.query(
    "SELECT id::text AS text FROM orders WHERE customer <> 'ada' ORDER BY id");
  const roundTrip = JSON.parse(JSON.stringify(ids));
  assert.deepEqual(roundTrip.map(String), stored.rows.map((row) => row.text), 'batch through JSON vs stored');
  await client.end();
  console.log(`pg ${require('pg/package.json').version} on js53: 1 key and ${ids.length} batch keys read ` +
    'as numbers, every digit the stored one, through JSON.stringify and JSON.parse, and snowflake_json ' +
    'parsed by JSON.parse');
}

main().catch((err) => { console.error(err); process.exit(1); });
