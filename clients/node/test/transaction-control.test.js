// endsTransaction against the table of cases that clients/python's
// ends_transaction is checked against too: both packages refuse the same
// statements on the claim's transaction.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { endsTransaction } from '../src/transaction-control.js';

const cases = JSON.parse(readFileSync(new URL('../../test-cases/transaction_control.json', import.meta.url), 'utf8'));

test('transaction control told apart from other statements, as in clients/python', () => {
  assert.ok(cases.length > 40);
  for (const [text, ends] of cases) assert.equal(endsTransaction(text), ends, JSON.stringify(text));
});
