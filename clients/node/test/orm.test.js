// Knex, Kysely and Drizzle bound to the claim's transaction
// (pg-idempotency-key/knex, /kysely, /drizzle), directly and through
// PgBouncer: the ORM's writes commit with the stored response, the server
// runs no statement for the ORM's bookkeeping, a handler error or the
// ORM's own commit/rollback leaves nothing, a write through the ORM's
// global instance is outside the guarantee (shown), and every SQLSTATE
// gets the answer req.idempotency.client gets.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  ORMS, listen, listenFastify, statementLog,
} from './orm/app.js';
import {
  DIRECT, POOLED, json, post, setupDatabase, sql, uniqueKey,
} from './helpers.js';

await setupDatabase();

const targets = [['direct', DIRECT], ...(POOLED ? [['pgbouncer', POOLED]] : [])];
const skus = async (key) => (await sql('SELECT sku FROM orders WHERE idempotency_key = $1 ORDER BY id', [key]))
  .map((r) => r.sku);
const recordOf = async (key) => (await sql('SELECT status, result FROM idempotent_record WHERE key = $1', [key]))[0];

for (const [target, dsn] of targets) {
  describe(`ORMs, ${target}`, () => {
    let app;
    before(async () => { app = await listen(dsn); });
    after(() => app.close());

    test('Fastify: the three ORMs in one request share the claim\'s transaction', async () => {
      const fastify = await listenFastify(dsn);
      try {
        const key = uniqueKey('fastify-all');
        const first = await post(fastify.url, '/all/orders', { key });
        const again = await post(fastify.url, '/all/orders', { key });
        assert.equal(first.status, 201, first.body.toString());
        assert.equal(again.headers['idempotent-replayed'], 'true');
        assert.equal(again.body.toString(), first.body.toString());
        assert.deepEqual(await skus(key), ORMS);
        const failed = uniqueKey('fastify-all-fail');
        assert.equal((await post(fastify.url, '/all/orders', { key: failed, body: { fail: true } })).status, 500);
        assert.deepEqual(await skus(failed), []);
        assert.equal(await recordOf(failed), undefined);
      } finally {
        await fastify.close();
      }
    });

    for (const orm of ORMS) {
      test(`${orm}: the write and the stored response commit together; the retry replays`, async () => {
        const key = uniqueKey(`${orm}-orders`);
        const first = await post(app.url, `/${orm}/orders`, { key, body: { sku: 'a' } });
        const again = await post(app.url, `/${orm}/orders`, { key, body: { sku: 'a' } });
        assert.equal(first.status, 201, first.body.toString());
        assert.equal(again.status, 201);
        assert.equal(again.headers['idempotent-replayed'], 'true');
        assert.equal(again.body.toString(), first.body.toString());
        const [order] = await sql('SELECT id FROM orders WHERE idempotency_key = $1', [key]);
        assert.equal(json(first).order_id, Number(order.id));
        assert.deepEqual(await skus(key), ['a']);
        assert.equal((await recordOf(key)).status, 'succeeded');
      });

      test(`${orm}: the server runs the ORM's insert, idem_finish and COMMIT, nothing else`, async () => {
        const key = uniqueKey(`${orm}-log`);
        const r = await post(app.url, `/${orm}/orders`, { key, body: { sku: 'l', log: true } });
        assert.equal(r.status, 201, r.body.toString());
        const log = statementLog.get(key);
        assert.equal(log.length, 3, JSON.stringify(log));
        assert.match(log[0], /^insert into "orders"/i);
        assert.match(log[1], /idem_finish/);
        assert.equal(log[2], 'COMMIT');
      });

      test(`${orm}: a handler error leaves nothing, and the key free`, async () => {
        const key = uniqueKey(`${orm}-fail`);
        for (let i = 0; i < 2; i++) {
          const r = await post(app.url, `/${orm}/fail`, { key });
          assert.equal(r.status, 500);
          assert.deepEqual(await skus(key), []);
          assert.equal(await recordOf(key), undefined);
        }
      });

      const ends = orm === 'drizzle' ? ['transaction', 'commit'] : ['commit', 'rollback'];
      for (const how of ends) {
        test(`${orm}: the handler's own ${how} is refused: 500 transaction-ended, nothing committed`, async () => {
          const key = uniqueKey(`${orm}-end-${how}`);
          const r = await post(app.url, `/${orm}/end`, { key, body: { how } });
          assert.equal(r.status, 500, r.body.toString());
          assert.equal(json(r).type, 'urn:idempotency:transaction-ended');
          assert.deepEqual(await skus(key), []);
          assert.equal(await recordOf(key), undefined);
        });
      }

      test(`${orm}: a write through the global instance is not covered: it commits on its own, again on each retry`, async () => {
        const key = uniqueKey(`${orm}-global`);
        const failed = await post(app.url, `/${orm}/global`, { key, body: { fail: true } });
        assert.equal(failed.status, 500);
        assert.deepEqual(await skus(key), ['global'], 'the transaction\'s row rolled back, the global one stayed');
        assert.equal(await recordOf(key), undefined);
        const ok = await post(app.url, `/${orm}/global`, { key, body: { fail: false } });
        assert.equal(ok.status, 201);
        assert.deepEqual((await skus(key)).sort(), ['global', 'global', 'trx'], 'the global write happened twice');
      });

      test(`${orm}: every SQLSTATE answers as on req.idempotency.client`, async () => {
        for (const code of ['40001', '25006', '57014', '23505']) {
          const [viaOrm, viaRaw] = await Promise.all([orm, 'raw'].map(async (path) => {
            const key = uniqueKey(`${path}-raise-${code}`);
            const r = await post(app.url, `/${path}/raise`, { key, body: { code } });
            const body = r.headers['content-type']?.startsWith('application/problem+json') ? json(r).type : null;
            return {
              status: r.status, type: body, retryAfter: r.headers['retry-after'] ?? null, orders: (await skus(key)).length,
            };
          }));
          assert.deepEqual(viaOrm, viaRaw, `SQLSTATE ${code}`);
        }
      });
    }
  });
}
