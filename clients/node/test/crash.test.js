// The application killed with kill -9 while requests are in flight (some of
// them held in their handler after their insert, some held after their
// handler answered and before idem_finish and COMMIT are sent, others
// finishing), then every key retried against a new process until answered:
// the held ones left neither their order nor a record, and every key has
// exactly one order and one stored response. On Express, Fastify, NestJS
// (on Express and on Fastify) and Hono; directly, and through PgBouncer when
// the suite has one.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { test } from 'node:test';
import { COMMIT_GATE, GATE } from './app.js';
import {
  DIRECT, FRAMEWORKS, POOLED, holdGate, ordersOf, post, setupDatabase, sql, startServer, uniqueKey, until, waitersAtGate,
} from './helpers.js';

await setupDatabase();
const DSNS = [['direct', DIRECT], ...(POOLED ? [['pgbouncer', POOLED]] : [])];

// (Express 4 runs the same middleware as Express 5.) 6 requests held at
// once: PgBouncer's pool has 10 server connections for the others.
for (const framework of FRAMEWORKS.filter((f) => f !== 'express4')) {
  for (const [target, dsn] of DSNS) {
    test(`${framework}, ${target}: kill -9 in the handler and between its answer and COMMIT; every key retried: one order, one stored response per key`, async () => {
      const gated = Array.from({ length: 3 }, (_, i) => uniqueKey(`crash-${framework}-gated${i}`));
      const atCommit = Array.from({ length: 3 }, (_, i) => uniqueKey(`crash-${framework}-at-commit${i}`));
      const free = Array.from({ length: 30 }, (_, i) => uniqueKey(`crash-${framework}-free${i}`));
      const keys = [...gated, ...atCommit, ...free];
      const bodyOf = (key) => ({ sku: key, gate: gated.includes(key) });

      const gate = await holdGate(GATE);
      const commitGate = await holdGate(COMMIT_GATE);
      const doomed = await startServer(dsn, framework);
      const inFlight = keys.flatMap((key) => [1, 2].map(() => post(doomed.url, '/orders/wait', { key, body: bodyOf(key) })
        .catch(() => null)));
      await waitersAtGate(GATE, gated.length);
      await waitersAtGate(COMMIT_GATE, atCommit.length);
      await until("SELECT count(*) >= 10 FROM idempotent_record WHERE status = 'succeeded' AND key = ANY($1)", [free]);
      doomed.child.kill('SIGKILL');
      await once(doomed.child, 'exit');
      const early = await Promise.all(inFlight);
      // the killed process answered none of the held keys
      assert.ok(early.every((r, i) => !r || !gated.concat(atCommit).includes(keys[Math.floor(i / 2)])),
        'no answer for a held key');
      await gate.release();
      await commitGate.release();
      // the server ends the dead process's sessions (those held in the handler
      // once the gate lets them read their socket): their transactions roll back
      await until('SELECT count(*) = 0 FROM pg_stat_activity WHERE datname = current_database()'
        + ' AND backend_xid IS NOT NULL AND pid <> pg_backend_pid()');
      assert.deepEqual(await ordersOf([...gated, ...atCommit]), {}, 'the held keys: no order');
      assert.equal((await sql('SELECT count(*)::int AS n FROM idempotent_record WHERE key = ANY($1)',
        [[...gated, ...atCommit]]))[0].n, 0, 'the held keys: no record');
      const again = await startServer(dsn, framework);
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
  }
}
