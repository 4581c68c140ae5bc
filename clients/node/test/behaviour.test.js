// Every HTTP behaviour of the package README, on Express 5, Express 4,
// Fastify, NestJS and Hono, directly and through PgBouncer (transaction pooling).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { parse } from 'pg-connection-string';
import { GATE, listen } from './app.js';
import { waiting as waitingInMemory } from '../src/flights.js';
import {
  DIRECT, FRAMEWORKS, RERUNS, TARGETS, holdGate, json, ordersOf, pollUntil, post, setupDatabase, sql, uniqueKey, until,
  waitersAtGate,
} from './helpers.js';

await setupDatabase();

const record = async (key) => (await sql(
  'SELECT status, fence, recovery_point FROM idempotent_record WHERE key = $1', [key],
))[0];

// Two requests held in flight at the gate: key on /orders (its duplicates
// answer 409 at once) and polled on /orders/wait (its duplicates wait).
async function twoInFlight(url, key, polled) {
  const gate = await holdGate(GATE);
  const body = { sku: 'g', gate: true };
  const first = post(url, '/orders', { key, body });
  const second = post(url, '/orders/wait', { key: polled, body });
  try {
    await waitersAtGate(GATE, 2);
  } catch (err) {
    await gate.release();
    throw err;
  }
  return { gate, first, second };
}

for (const framework of FRAMEWORKS) {
  for (const [target, dsn, options] of TARGETS) {
    describe(`${framework}, ${target}`, () => {
      let app;
      let pool;
      // the same app with a pool of its own, as another process would be:
      // it learns of the first app's requests only from the server
      let twin;
      let twinPool;
      before(async () => {
        pool = new pg.Pool({ connectionString: dsn, max: 4 });
        app = await listen(framework, { pool, ...options });
        twinPool = new pg.Pool({ connectionString: dsn, max: 2 });
        twin = await listen(framework, { pool: twinPool, ...options });
      });
      after(async () => {
        await app.close();
        await pool.end();
        await twin.close();
        await twinPool.end();
      });
      // (a key has no comma: the target's name loses its punctuation)
      const k = (label) => uniqueKey(`${framework}-${target}-${label}`.replace(/[^\w/.-]+/g, '-'));

      test('a missing key is 400 problem+json; a malformed one 400', async () => {
        const missing = await post(app.url, '/orders', { body: { sku: 'a' } });
        assert.equal(missing.status, 400);
        assert.equal(missing.headers['content-type'], 'application/problem+json');
        assert.deepEqual(Object.keys(json(missing)).sort(), ['detail', 'status', 'title', 'type']);
        assert.equal(json(missing).type, 'urn:idempotency:key-missing');
        for (const bad of ['x'.repeat(256), 'tab\there', '']) {
          const r = await post(app.url, '/orders', { key: bad, body: { sku: 'a' } });
          assert.equal(r.status, 400, JSON.stringify(bad));
          assert.equal(json(r).type, 'urn:idempotency:key-invalid');
        }
        assert.equal((await sql('SELECT count(*)::int AS n FROM orders WHERE idempotency_key = $1', [''])).at(0).n, 0);
      });

      test('the key is optional where the route says so: the handler runs unprotected', async () => {
        const sku = k('optional');
        const r = await post(app.url, '/orders/optional', { body: { sku } });
        assert.equal(r.status, 201);
        assert.equal(r.headers['idempotent-replayed'], undefined);
        assert.equal((await sql('SELECT count(*)::int AS n FROM orders WHERE sku = $1', [sku]))[0].n, 1);
      });

      test('201, then the same bytes replayed with Idempotent-Replayed: true; one order', async () => {
        const key = k('replay');
        const first = await post(app.url, '/orders', { key, body: { sku: 's', qty: 1 } });
        assert.equal(first.status, 201);
        assert.equal(first.headers['idempotent-replayed'], undefined);
        // another key order and white space: the same JSON body
        const again = await post(app.url, '/orders', { key, body: '{ "qty": 1,  "sku": "s" }' });
        assert.equal(again.status, 201);
        assert.equal(again.headers['idempotent-replayed'], 'true');
        assert.ok(again.body.equals(first.body));
        assert.equal(again.headers.location, first.headers.location);
        assert.equal(again.headers['content-type'], first.headers['content-type']);
        assert.deepEqual(await ordersOf([key]), { [key]: 1 });
        assert.equal((await record(key)).status, 'succeeded');
      });

      test('the key reused with another body, path or scope', async () => {
        const key = k('reuse');
        assert.equal((await post(app.url, '/orders', { key, body: { sku: 'a' } })).status, 201);
        const body = await post(app.url, '/orders', { key, body: { sku: 'b' } });
        assert.equal(body.status, 422);
        assert.equal(json(body).type, 'urn:idempotency:key-reused');
        assert.equal((await post(app.url, '/orders/404', { key, body: { sku: 'a' } })).status, 422);
        // another tenant is another scope: its own record
        assert.equal((await post(app.url, '/orders', { key, body: { sku: 'b' }, tenant: 't2' })).status, 201);
        assert.deepEqual(await ordersOf([key]), { [key]: 2 });
      });

      test('bytes that are not JSON: SHA-256 fingerprint, a binary response replayed exactly', async () => {
        const key = k('binary');
        const type = 'application/octet-stream';
        const first = await post(app.url, '/binary', { key, body: Buffer.from([1, 2, 3]), type });
        assert.equal(first.status, 200);
        assert.ok(first.body.equals(Buffer.from([0, 255, 254, 1, 1, 2, 3])));
        const again = await post(app.url, '/binary', { key, body: Buffer.from([1, 2, 3]), type });
        assert.equal(again.headers['idempotent-replayed'], 'true');
        assert.ok(again.body.equals(first.body));
        assert.equal((await post(app.url, '/binary', { key, body: Buffer.from([1, 2, 4]), type })).status, 422);
      });

      test('a handler that throws after its insert: 500, nothing kept; the retry places one order', async () => {
        const key = k('throw');
        const r = await post(app.url, '/orders/throw', { key, body: { sku: 't' } });
        assert.equal(r.status, 500);
        assert.deepEqual(await ordersOf([key]), {});
        assert.equal(await record(key), undefined);
        const retry = await post(app.url, '/orders/throw', { key, body: { sku: 't' } });
        assert.equal(retry.status, 201, 'the key was released, the handler ran again');
        assert.deepEqual(await ordersOf([key]), { [key]: 1 });
        const replay = await post(app.url, '/orders/throw', { key, body: { sku: 't' } });
        assert.equal(replay.headers['idempotent-replayed'], 'true');
      });

      test('a 5xx answer releases the key; a 4xx is stored and replayed unless configured', async () => {
        const key5 = k('503');
        assert.equal((await post(app.url, '/orders/503', { key: key5, body: {} })).status, 503);
        assert.deepEqual(await ordersOf([key5]), {});
        assert.equal(await record(key5), undefined);
        const key4 = k('404');
        const first = await post(app.url, '/orders/404', { key: key4, body: { sku: 'x' } });
        assert.equal(first.status, 404);
        const again = await post(app.url, '/orders/404', { key: key4, body: { sku: 'x' } });
        assert.equal(again.status, 404);
        assert.equal(again.headers['idempotent-replayed'], 'true');
        assert.ok(again.body.equals(first.body), 'the random number of the first answer');
        const keyN = k('404-not-stored');
        await post(app.url, '/orders/404-not-stored', { key: keyN, body: { sku: 'x' } });
        assert.equal(await record(keyN), undefined);
        assert.deepEqual(await ordersOf([keyN]), {});
      });

      for (const [route, where] of [['/orders/conflict', 'in the handler'],
        ['/orders/conflict-at-commit', 'at COMMIT, after the handler answered']]) {
        test(`a serialization failure ${where}: run again; past the retries 503 + Retry-After`, async () => {
          const key = k(route);
          let r = await post(app.url, route, { key, body: { sku: 'c' } });
          if (!RERUNS.has(framework)) {
            // answered 503 retry at once, nothing kept; the client's retry runs once
            assert.equal(r.status, 503);
            assert.equal(json(r).type, 'urn:idempotency:retry');
            assert.equal(r.headers['retry-after'], '1');
            assert.deepEqual(await ordersOf([key]), {});
            r = await post(app.url, route, { key, body: { sku: 'c' } });
          }
          assert.equal(r.status, 201);
          assert.equal(r.headers['idempotent-replayed'], undefined);
          assert.deepEqual(await ordersOf([key]), { [key]: 1 });
          assert.equal((await record(key)).status, 'succeeded');
          const again = await post(app.url, route, { key, body: { sku: 'c' } });
          assert.equal(again.headers['idempotent-replayed'], 'true');
          assert.ok(again.body.equals(r.body));
          const always = k(`${route}-always`);
          const out = await post(app.url, `${route}?always=1`, { key: always, body: { sku: 'c' } });
          assert.equal(out.status, 503);
          assert.equal(out.headers['retry-after'], '1');
          assert.equal(json(out).type, 'urn:idempotency:retry');
          assert.deepEqual(await ordersOf([always]), {});
          assert.equal(await record(always), undefined);
        });
      }

      // a duplicate in the same process is answered without a round trip,
      // one in the twin by the server: both are checked
      test('a duplicate of a request in flight: 409 + Retry-After at once, or the replay after waiting', async () => {
        const key = k('inflight');
        const polled = k('polled');
        const { gate, first, second } = await twoInFlight(app.url, key, polled);
        let waiting;
        try {
          for (const url of [app.url, twin.url]) {
            const dup = await post(url, '/orders', { key, body: { sku: 'g', gate: true } });
            assert.equal(dup.status, 409);
            assert.equal(dup.headers['retry-after'], '1');
            assert.equal(json(dup).type, 'urn:idempotency:in-progress');
          }
          // a duplicate with another body is no duplicate: 422 (the server says)
          const reused = await post(app.url, '/orders', { key, body: { sku: 'h', gate: true } });
          assert.equal(reused.status, 422);
          // duplicates that wait (the route's waitFor): 6 in each app, more
          // than the pools' free connections (2 and 2; the twin's poll the
          // server), and another key gets through
          waiting = [app.url, twin.url].flatMap((url) => Array.from({ length: 6 },
            () => post(url, '/orders/wait', { key: polled, body: { sku: 'g', gate: true } })));
          for (const url of [app.url, twin.url]) {
            const other = await post(url, '/orders', { key: k('other'), body: { sku: 'o' } });
            assert.equal(other.status, 201, 'the pool is not held by waiting duplicates');
          }
        } finally {
          await gate.release();
        }
        assert.equal((await first).status, 201);
        const original = await second;
        assert.equal(original.status, 201);
        for (const r of await Promise.all(waiting)) {
          assert.equal(r.status, 201);
          assert.equal(r.headers['idempotent-replayed'], 'true');
          assert.ok(r.body.equals(original.body));
        }
        assert.deepEqual(await ordersOf([key, polled]), { [key]: 1, [polled]: 1 });
      });

      test('a duplicate storm: 20 keys, 5 concurrent copies each, polling until answered', async () => {
        const keys = Array.from({ length: 20 }, (_, i) => k(`storm${i}`));
        const answers = await Promise.all(keys.flatMap((key) => Array.from({ length: 5 },
          () => post(app.url, '/orders/wait', { key, body: { sku: key } }).then((r) => [key, r]))));
        for (const key of keys) {
          const mine = answers.filter(([kk]) => kk === key).map(([, r]) => r);
          assert.ok(mine.every((r) => r.status === 201), `${key}: ${mine.map((r) => r.status)}`);
          assert.equal(mine.filter((r) => r.headers['idempotent-replayed'] !== 'true').length, 1, `${key}: one original`);
          assert.ok(mine.every((r) => r.body.equals(mine[0].body)));
        }
        const orders = await ordersOf(keys);
        assert.ok(keys.every((key) => orders[key] === 1), JSON.stringify(orders));
      });

      test('leased: fence, checkpoint, heartbeat; an unknown outcome stays 409; a failure is taken over', async () => {
        const key = k('leased');
        const r = await post(app.url, '/orders/leased', { key, body: { sku: 'l' } });
        assert.equal(r.status, 201);
        assert.equal(json(r).fence, 1);
        assert.equal((await record(key)).recovery_point, 'before-call');
        assert.equal((await post(app.url, '/orders/leased', { key, body: { sku: 'l' } })).headers['idempotent-replayed'], 'true');

        const unknown = k('unknown');
        assert.equal((await post(app.url, '/orders/leased?unknown=1', { key: unknown, body: {} })).status, 504);
        assert.equal((await record(unknown)).status, 'unknown');
        const dup = await post(app.url, '/orders/leased?unknown=1', { key: unknown, body: {} });
        assert.equal(dup.status, 409);
        assert.ok(Number(dup.headers['retry-after']) >= 1);

        const failed = k('leased-fail');
        assert.equal((await post(app.url, '/orders/leased?fail=1', { key: failed, body: {} })).status, 500);
        assert.equal((await record(failed)).status, 'in_progress');
        const retry = await post(app.url, '/orders/leased', { key: failed, body: {} });
        assert.equal(retry.status, 422, 'another path: ?fail=1 is part of the request');
        const same = await post(app.url, '/orders/leased?fail=1', { key: failed, body: {} });
        assert.equal(same.status, 500);
        assert.equal(Number((await record(failed)).fence), 2, 'the retry took the released key over');
      });
    });
  }
}

describe('SQLSTATEs of the connection', () => {
  test('42501 (scope not granted) is 403; 25006 (read-only) is 503', async () => {
    await sql(`DO $$ BEGIN CREATE ROLE idem_node_noscope LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`);
    await sql('GRANT USAGE ON SCHEMA public TO idem_node_noscope');
    await sql('GRANT SELECT, INSERT ON orders TO idem_node_noscope');
    await sql('GRANT USAGE ON SEQUENCE orders_id_seq TO idem_node_noscope');
    const noscope = new pg.Pool({ ...parse(DIRECT), user: 'idem_node_noscope', max: 2 });
    const readOnly = new pg.Pool({ connectionString: DIRECT, options: '-c default_transaction_read_only=on', max: 2 });
    for (const framework of FRAMEWORKS) {
      const a = await listen(framework, { pool: noscope });
      const b = await listen(framework, { pool: readOnly });
      try {
        const forbidden = await post(a.url, '/orders', { key: uniqueKey('noscope'), body: {} });
        assert.equal(forbidden.status, 403, framework);
        assert.equal(forbidden.headers['content-type'], 'application/problem+json');
        const ro = await post(b.url, '/orders', { key: uniqueKey('ro'), body: {} });
        assert.equal(ro.status, 503, framework);
        assert.equal(json(ro).type, 'urn:idempotency:read-only');
      } finally {
        await a.close();
        await b.close();
      }
    }
    await noscope.end();
    await readOnly.end();
  });

  test('a duplicate of a request this process runs takes no pooled connection', async () => {
    const real = new pg.Pool({ connectionString: DIRECT, max: 4 });
    let connects = 0;
    const counting = { connect: () => { connects += 1; return real.connect(); } };
    for (const framework of FRAMEWORKS) {
      const app = await listen(framework, { pool: counting });
      const key = uniqueKey(`local-${framework}`);
      const polled = uniqueKey(`local-polled-${framework}`);
      const { gate, first, second } = await twoInFlight(app.url, key, polled);
      const connectsBefore = connects;
      let waiting;
      try {
        const dup = await post(app.url, '/orders', { key, body: { sku: 'g', gate: true } });
        assert.equal(dup.status, 409);
        waiting = post(app.url, '/orders/wait', { key: polled, body: { sku: 'g', gate: true } });
        // (a duplicate sent after the waiting one: both answered with no connection taken)
        assert.equal((await post(app.url, '/orders', { key, body: { sku: 'g', gate: true } })).status, 409);
        await pollUntil(() => waitingInMemory(counting) === 1, 'a duplicate waiting in memory');
        assert.equal(connects, connectsBefore, framework);
      } finally {
        await gate.release();
      }
      assert.equal((await first).status, 201);
      const original = await second;
      const replay = await waiting;
      // the whole life of the three duplicates, the waiting one's replay included
      assert.equal(connects, connectsBefore, framework);
      assert.equal(replay.status, 201);
      assert.equal(replay.headers['idempotent-replayed'], 'true');
      assert.ok(replay.body.equals(original.body));
      assert.equal(replay.headers.location, original.headers.location);
      await app.close();
    }
    await real.end();
  });

  test('40001 on the claim is retried a bounded number of times', async () => {
    // a pool whose first N claims are preceded by a statement raising a
    // real 40001 on the server
    const real = new pg.Pool({ connectionString: DIRECT, max: 2 });
    const failing = (n) => ({
      connect: async () => {
        const client = await real.connect();
        const query = client.query.bind(client);
        client.query = (config, ...rest) => {
          // the claim's round trip (pipeline.js) opens with the raise
          if (config && config.steps && config.steps.some((s) => s.text.includes('idem_claim')) && n-- > 0) {
            config.steps.unshift({ text: "DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$" });
          }
          return query(config, ...rest);
        };
        const release = client.release.bind(client);
        client.release = (err) => { delete client.query; delete client.release; release(err); };
        return client;
      },
    });
    const key = uniqueKey('claim-retry');
    const twice = await listen('express5', { pool: failing(2), retries: 3 });
    assert.equal((await post(twice.url, '/orders', { key, body: {} })).status, 201);
    await twice.close();
    const always = await listen('fastify', { pool: failing(10), retries: 3 });
    const r = await post(always.url, '/orders', { key: uniqueKey('claim-retry-out'), body: {} });
    assert.equal(r.status, 503);
    assert.equal(r.headers['retry-after'], '1');
    await always.close();
    await real.end();
  });
});
