// Knex, Kysely and Drizzle (test/orm/app.js) with the application in
// processes of its own, directly and through PgBouncer:
// - kill -9 after the handler answered and before its outcome's round trip
//   (idem_finish and COMMIT) was sent: neither the ORM's write nor the
//   stored response committed; the retry in a new process runs once;
// - a storm of duplicates over two processes: one effect per key and the
//   same answer to every copy.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { ORMS } from './orm/app.js';
import {
  DIRECT, POOLED, ordersOf, post, setupDatabase, sql, uniqueKey,
} from './helpers.js';

await setupDatabase();
const targets = [['direct', DIRECT], ...(POOLED ? [['pgbouncer', POOLED]] : [])];

// -> {child, url, lines (the lines it printed after its URL), printed(n)};
// hold: requests with a key "held-..." are held before their commit
async function startServer(dsn, options = {}, hold = false) {
  const child = spawn(process.execPath, [new URL('./orm/server.js', import.meta.url).pathname, dsn,
    JSON.stringify(options), ...(hold ? ['hold'] : [])], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = [];
  const waiters = [];
  const rl = createInterface({ input: child.stdout });
  rl.on('line', (line) => { lines.push(line); waiters.splice(0).forEach((w) => w()); });
  while (lines.length === 0) await new Promise((resolve) => { waiters.push(resolve); child.once('exit', resolve); });
  const url = lines.shift();
  const printed = async (n) => {
    while (lines.length < n) await new Promise((resolve) => { waiters.push(resolve); });
  };
  return { child, url, lines, printed };
}

// every key's POST until it is not 409 (a duplicate still in flight)
async function untilAnswered(url, path, key, body) {
  for (;;) {
    const r = await post(url, path, { key, body });
    if (r.status !== 409) return r;
    await new Promise((resolve) => setTimeout(resolve, 1000 * Number(r.headers['retry-after'])));
  }
}

for (const [target, dsn] of targets) {
  test(`${target}: kill -9 between the handler's answer and the commit leaves neither; the retry runs once`, async () => {
    const keys = ORMS.flatMap((orm) => [1, 2].map(() => [orm, uniqueKey(`held-${orm}`)]));
    const doomed = await startServer(dsn, {}, true);
    const inFlight = keys.map(([orm, key]) => post(doomed.url, `/${orm}/orders`, { key, body: { sku: key } })
      .catch(() => null));
    await doomed.printed(keys.length);
    assert.deepEqual(doomed.lines.sort(), keys.map(([, key]) => `held ${key}`).sort());
    doomed.child.kill('SIGKILL');
    await once(doomed.child, 'exit');
    assert.ok((await Promise.all(inFlight)).every((r) => r === null), 'no answer reached a client');
    const again = await startServer(dsn);
    try {
      const answers = await Promise.all(keys.map(([orm, key]) => untilAnswered(again.url, `/${orm}/orders`, key,
        { sku: key })));
      for (const [i, [, key]] of keys.entries()) {
        assert.equal(answers[i].status, 201, answers[i].body.toString());
        assert.equal(answers[i].headers['idempotent-replayed'], undefined, `${key}: the retry ran (nothing committed before)`);
      }
      const orders = await ordersOf(keys.map(([, key]) => key));
      assert.ok(keys.every(([, key]) => orders[key] === 1), `one order per key: ${JSON.stringify(orders)}`);
      for (const [i, [, key]] of keys.entries()) {
        const [record] = await sql("SELECT result ->> 'body' AS body FROM idempotent_record WHERE key = $1"
          + " AND status = 'succeeded'", [key]);
        assert.equal(record.body, answers[i].body.toString(), `${key}: the stored response is the answer`);
      }
    } finally {
      again.child.kill('SIGKILL');
    }
  });

  test(`${target}: a storm of duplicates over two processes: one effect per key, the same answer to every copy`, async () => {
    const servers = await Promise.all([1, 2].map(() => startServer(dsn, { waitFor: 30000 })));
    try {
      const keys = ORMS.flatMap((orm) => [1, 2, 3].map(() => [orm, uniqueKey(`storm-${orm}`)]));
      const copies = keys.flatMap(([orm, key]) => Array.from({ length: 6 }, (_, i) => untilAnswered(servers[i % 2].url,
        `/${orm}/orders`, key, { sku: key })));
      const answers = await Promise.all(copies);
      for (const [k, [, key]] of keys.entries()) {
        const mine = answers.slice(k * 6, k * 6 + 6);
        assert.ok(mine.every((r) => r.status === 201), `${key}: ${mine.map((r) => r.status)}`);
        assert.equal(new Set(mine.map((r) => r.body.toString())).size, 1, `${key}: one answer for every copy`);
      }
      const orders = await ordersOf(keys.map(([, key]) => key));
      assert.ok(keys.every(([, key]) => orders[key] === 1), `one order per key: ${JSON.stringify(orders)}`);
    } finally {
      servers.forEach((s) => s.child.kill('SIGKILL'));
    }
  });
}
