// knex (on node-postgres): the recipes of docs/clients/node.md, run against a server with
// the extension.
'use strict';
const { assert, increasing, numberTraps } = require('./check');

const customers = Array.from({ length: 1000 }, (_, i) => `customer ${i}`);

async function main() {
  // PGHOST, PGDATABASE, ... from the environment
  const knex = require('knex')({ client: 'pg', connection: {} });
  // region: schema
  await knex.schema.createTable('orders', (table) => {
    table.bigInteger('id').primary().defaultTo(knex.raw('snowflake_nextval(4)'));
    table.text('customer').notNullable();
  });
  // endregion

  // region: insert
  const [{ id }] = await knex('orders').insert({ customer: 'ada' }).returning('id');
  // id is a string (node-postgres reads int8 as text): keep it one, or BigInt(id)
  // endregion
  assert.equal(typeof id, 'string');
  assert.equal((await knex('orders').where({ customer: 'ada' }).first('id')).id, id,
    'key read back vs stored');

  // region: batch
  const rows = await knex('orders')
    .insert(customers.map((customer) => ({ customer })))
    .returning('id'); // one INSERT ... VALUES (...), (...) RETURNING id
  const ids = rows.map((row) => BigInt(row.id));
  // endregion
  increasing(ids, customers.length, 'insert([...]).returning(id)');
  const all = await knex('orders').whereNot({ customer: 'ada' }).orderBy('id').select('id');
  assert.deepEqual(ids, all.map((row) => BigInt(row.id)), 'batch keys vs stored');

  // region: decode
  const parts = await knex('orders')
    .select('id', knex.raw('snowflake_shard(id) AS shard'), knex.raw('snowflake_timestamp(id) AS ts'))
    .where({ id })
    .first(); // parts.shard a number, parts.ts a Date
  // endregion
  assert.equal(parts.shard, 4, 'decoded shard');
  const ms = await knex.raw('SELECT (extract(epoch FROM snowflake_timestamp(?)) * 1000)::bigint AS ms', [id]);
  assert.equal(parts.ts.getTime(), Number(ms.rows[0].ms), 'decoded timestamp');

  // region: json
  const { rows: [{ json }] } = await knex.raw('SELECT snowflake_json(?) AS json', [id]);
  // json: an object whose id is a string; JSON.stringify(json) keeps every digit
  // endregion
  assert.equal(json.id, id, "snowflake_json's id");
  assert.equal(json.shard, 4, "snowflake_json's shard");
  await knex.destroy();

  const traps = numberTraps(all.map((row) => row.id));
  console.log(`knex ${require('knex/package.json').version}: 1 key and ${ids.length} batch keys ` +
    `read back as stored, increasing; decoded shard 4; snowflake_json gives the ID as text; ` +
    `Number(id) changes ${traps.byNumber} of ${ids.length} IDs (${traps.distinct} distinct numbers left)`);
}

main().catch((err) => { console.error(err); process.exit(1); });
