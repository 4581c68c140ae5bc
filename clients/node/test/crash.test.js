// The application killed with kill -9 while requests are in flight (some of
// them held after their insert, others finishing), then every key retried
// against a new process until answered: exactly one order and one stored
// response per key. Through PgBouncer when the suite has one.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { GATE } from './app.js';
import {
  DIRECT, POOLED, holdGate, ordersOf, post, setupDatabase, sql, uniqueKey, until, waitersAtGate,
} from './helpers.js';

await setupDatabase();
const dsn = POOLED ?? DIRECT;

async function startServer() {
  const child = spawn(process.execPath, [new URL('./server.js', import.meta.url).pathname, dsn],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  const [url] = await once(createInterface({ input: child.stdout }), 'line');
  return { child, url };
}

test('kill -9 mid-request, then every key retried until answered: one order, one stored response per key', async () => {
  const gated = Array.from({ length: 5 }, (_, i) => uniqueKey(`crash-gated${i}`));
  const free = Array.from({ length: 35 }, (_, i) => uniqueKey(`crash-free${i}`));
  const keys = [...gated, ...free];
  const bodyOf = (key) => ({ sku: key, gate: gated.includes(key) });

  const gate = await holdGate(GATE);
  const doomed = await startServer();
  const inFlight = keys.flatMap((key) => [1, 2].map(() => post(doomed.url, '/orders/wait', { key, body: bodyOf(key) })
    .catch(() => null)));
  await waitersAtGate(GATE, gated.length);
  await until("SELECT count(*) >= 10 FROM idempotent_record WHERE status = 'succeeded' AND key = ANY($1)", [free]);
  doomed.child.kill('SIGKILL');
  await once(doomed.child, 'exit');
  await Promise.all(inFlight);
  await gate.release();
  const again = await startServer();
  try {
    const answers = {};
    await Promise.all(keys.map(async (key) => {
      for (;;) {
        const r = await post(again.url, '/orders/wait', { key, body: bodyOf(key) });
        if (r.status !== 409) { answers[key] = r; return; }
        await new Promise((resolve) => setTimeout(resolve, 1000 * Number(r.headers['retry-after'])));
      }
    }));
    assert.ok(keys.every((key) => answers[key].status === 201), JSON.stringify(Object.values(answers).map((r) => r.status)));
    const orders = await ordersOf(keys);
    assert.ok(keys.every((key) => orders[key] === 1), `one order per key: ${JSON.stringify(orders)}`);
    const records = await sql("SELECT key, result ->> 'body' AS body FROM idempotent_record"
      + " WHERE key = ANY($1) AND status = 'succeeded'", [keys]);
    assert.equal(records.length, keys.length, 'one stored response per key');
    for (const { key, body } of records) {
      assert.equal(answers[key].body.toString(), body, `${key}: the answer is the stored response`);
      assert.equal(JSON.parse(body).order_id, (await sql('SELECT id FROM orders WHERE idempotency_key = $1', [key]))[0].id);
    }
  } finally {
    again.child.kill('SIGKILL');
  }
});
