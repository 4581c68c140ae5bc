// A storm of duplicates over two processes of the same application (two
// pools, as two replicas behind a load balancer): every copy of a key gets
// the same answer, one of them the original, and each key has one effect.
// On Express, Fastify, NestJS and Hono, directly and through PgBouncer.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  FRAMEWORKS, TARGETS, ordersOf, post, setupDatabase, startServer, uniqueKey,
} from './helpers.js';

await setupDatabase();

for (const framework of FRAMEWORKS.filter((f) => f !== 'express4')) {
  for (const [target, dsn] of TARGETS.filter(([, , options]) => !options.prepare)) {
    test(`${framework}, ${target}: 20 keys, 6 copies each over two processes: one order, the same answer`, async () => {
      const apps = await Promise.all([startServer(dsn, framework), startServer(dsn, framework)]);
      try {
        const keys = Array.from({ length: 20 }, (_, i) => uniqueKey(`storm2-${framework}-${target}-${i}`));
        const answers = await Promise.all(keys.flatMap((key) => Array.from({ length: 6 }, (_, copy) => (async () => {
          // a copy answered 409 (the other process still runs it) is retried
          // after Retry-After, as a client would
          for (;;) {
            const r = await post(apps[copy % 2].url, '/orders/wait', { key, body: { sku: key } });
            if (r.status !== 409) return [key, r];
            await new Promise((resolve) => setTimeout(resolve, 1000 * Number(r.headers['retry-after'])));
          }
        })())));
        for (const key of keys) {
          const mine = answers.filter(([kk]) => kk === key).map(([, r]) => r);
          assert.ok(mine.every((r) => r.status === 201), `${key}: ${mine.map((r) => r.status)}`);
          assert.equal(mine.filter((r) => r.headers['idempotent-replayed'] !== 'true').length, 1, `${key}: one original`);
          assert.ok(mine.every((r) => r.body.equals(mine[0].body)), `${key}: the same body`);
          assert.ok(mine.every((r) => r.headers.location === mine[0].headers.location), `${key}: the same Location`);
        }
        const orders = await ordersOf(keys);
        assert.ok(keys.every((key) => orders[key] === 1), JSON.stringify(orders));
      } finally {
        for (const app of apps) app.child.kill('SIGKILL');
      }
    });
  }
}
