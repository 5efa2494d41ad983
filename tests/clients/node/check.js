// What every Node recipe asserts, shared.
'use strict';
const assert = require('node:assert/strict');

// Distinct, increasing keys, n of them (as BigInt: compared exactly).
function increasing(ids, n, what) {
  assert.equal(ids.length, n, `${what}: number of keys`);
  assert.equal(new Set(ids).size, n, `${what}: distinct keys`);
  ids.slice(1).forEach((id, i) => assert.ok(ids[i] < id, `${what}: keys not increasing at ${i}`));
}

// How many of the IDs (strings) Number() changes, and how many JSON.parse changes when the ID
// is a JSON number: the trap the docs state, shown to be real.
function numberTraps(ids) {
  const byNumber = ids.filter((id) => BigInt(Number(id)) !== BigInt(id)).length;
  const byJson = ids.filter((id) => BigInt(JSON.parse(`{"id": ${id}}`).id) !== BigInt(id)).length;
  const distinct = new Set(ids.map(Number)).size; // IDs a few apart become the same number
  assert.ok(byNumber > 0, 'Number() changed no ID: the trap the docs state did not show');
  assert.ok(byJson > 0, 'JSON.parse changed no ID: the trap the docs state did not show');
  assert.ok(distinct < ids.length, 'Number() kept every ID distinct: the trap did not show');
  assert.throws(() => JSON.stringify({ id: BigInt(ids[0]) }), TypeError);
  return { byNumber, byJson, distinct };
}

module.exports = { assert, increasing, numberTraps };
