// The ORM integrations (pg-idempotency-key/prisma, /typeorm) on Express 5,
// directly and through PgBouncer: the ORM's writes commit with the stored
// response and only with it (replay, handler error, the ORM's own
// transaction control, its global client outside the bound transaction),
// no round trip beyond the raw driver's, a storm of duplicates over two
// processes, kill -9 before the commit; and the README's examples run as
// printed.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { GATE } from './app.js';
import {
  DIRECT, POOLED, holdGate, json, ordersOf, pollUntil, post, setupDatabase, sql, uniqueKey, until, waitersAtGate,
} from './helpers.js';
import { generatePrisma } from './orm/generate.js';

await setupDatabase();
generatePrisma();
const { listenOrm } = await import('./orm/prisma-app.js');

const ORMS = ['prisma', 'typeorm'];
const TARGETS = [['direct', DIRECT], ...(POOLED ? [['pgbouncer', POOLED]] : [])];
const here = new URL('.', import.meta.url).pathname;

const recordOf = async (key) => (await sql('SELECT status FROM idempotent_record WHERE key = $1', [key]))[0];
const skusOf = async (key) => (await sql('SELECT sku FROM orders WHERE idempotency_key = $1 ORDER BY id', [key]))
  .map((r) => r.sku);

async function startServer(dsn) {
  const child = spawn(process.execPath, [`${here}orm/prisma-server.js`, dsn], { stdio: ['ignore', 'pipe', 'inherit'] });
  const [url] = await once(createInterface({ input: child.stdout }), 'line');
  return { child, url };
}

for (const [target, dsn] of TARGETS) {
  describe(`ORMs, ${target}`, () => {
    let app;
    before(async () => { app = await listenOrm(dsn); });
    after(() => app.close());

    for (const orm of ORMS) {
      test(`${orm}: the write and the stored response commit together; a retry is replayed`, async () => {
        const key = uniqueKey(`${orm}-replay`);
        const first = await post(app.url, `/${orm}/orders`, { key, body: { sku: key } });
        assert.equal(first.status, 201, first.body.toString());
        const again = await post(app.url, `/${orm}/orders`, { key, body: { sku: key } });
        assert.equal(again.status, 201);
        assert.deepEqual(json(again), json(first));
        assert.deepEqual(await skusOf(key), [key]);
        assert.equal((await sql('SELECT id FROM orders WHERE idempotency_key = $1', [key]))[0].id, String(json(first).order_id));
        assert.equal((await recordOf(key)).status, 'succeeded');
      });

      test(`${orm}: a handler error after the write leaves nothing; the retry runs once`, async () => {
        const key = uniqueKey(`${orm}-fail`);
        const failed = await post(app.url, `/${orm}/orders?fail=1`, { key, body: { sku: key } });
        assert.equal(failed.status, 500);
        assert.deepEqual(await skusOf(key), []);
        assert.equal(await recordOf(key), undefined);
        const retry = await post(app.url, `/${orm}/orders`, { key, body: { sku: key } });
        assert.equal(retry.status, 201);
        assert.deepEqual(await skusOf(key), [key]);
      });

      test(`${orm}: a write through the ORM's own client outside the bound transaction commits on its own`
        + ' (documented: not covered)', async () => {
        const key = uniqueKey(`${orm}-global`);
        const failed = await post(app.url, `/${orm}/orders?global=1`, { key, body: { sku: key } });
        assert.equal(failed.status, 500);
        assert.deepEqual(await skusOf(key), ['global'], 'the global write stays although the request failed');
        assert.equal(await recordOf(key), undefined);
      });
    }

    for (const [orm, query, what] of [['prisma', 'outside', 'the PrismaClient itself inside prismaTransaction()'],
      ['typeorm', 'commit', 'commitTransaction() of the bound runner']]) {
      test(`${orm}: ${what} is refused, nothing commits`, async () => {
        const key = uniqueKey(`${orm}-${query}`);
        const r = await post(app.url, `/${orm}/orders?${query}=1`, { key, body: { sku: key } });
        assert.equal(r.status, 500);
        assert.equal(json(r).type, 'urn:idempotency:transaction-ended');
        assert.deepEqual(await skusOf(key), []);
        assert.equal(await recordOf(key), undefined);
      });
    }

    test('typeorm: manager.transaction() inside is a savepoint: its failure rolls back only its rows', async () => {
      const key = uniqueKey('typeorm-nested');
      const r = await post(app.url, '/typeorm/orders?nested=1', { key, body: { sku: key } });
      assert.equal(r.status, 201, r.body.toString());
      assert.deepEqual(await skusOf(key), [key]);
    });

    for (const orm of ORMS) {
      test(`${orm}: a storm of duplicates over two processes: one order, the same answer to every copy`, async () => {
        const servers = [await startServer(dsn), await startServer(dsn)];
        try {
          const key = uniqueKey(`${orm}-storm`);
          const answers = await Promise.all(Array.from({ length: 16 }, (_, i) => post(servers[i % 2].url,
            `/${orm}/orders`, { key, body: { sku: key } })));
          assert.deepEqual(answers.map((a) => a.status), answers.map(() => 201));
          assert.equal(new Set(answers.map((a) => a.body.toString())).size, 1, 'the same answer to every copy');
          assert.deepEqual(await skusOf(key), [key]);
        } finally {
          for (const s of servers) s.child.kill('SIGKILL');
        }
      });

      test(`${orm}: kill -9 with writes in flight, then every key retried: one order and one stored response`
        + ' per key', async () => {
        const gated = Array.from({ length: 3 }, (_, i) => uniqueKey(`${orm}-crash-gated${i}`));
        const free = Array.from({ length: 12 }, (_, i) => uniqueKey(`${orm}-crash-free${i}`));
        const keys = [...gated, ...free];
        const bodyOf = (key) => ({ sku: key, gate: gated.includes(key) });
        const gate = await holdGate(GATE);
        const doomed = await startServer(dsn);
        // listened for before the kill: the child may exit while the gate
        // is released, before a listener added afterwards
        const exited = once(doomed.child, 'exit');
        const inFlight = keys.map((key) => post(doomed.url, `/${orm}/orders`, { key, body: bodyOf(key) })
          .catch(() => null));
        try {
          // the gated ones have written and wait before their commit
          await waitersAtGate(GATE, gated.length);
          await until("SELECT count(*) >= 4 FROM idempotent_record WHERE status = 'succeeded' AND key = ANY($1)",
            [free]);
        } finally {
          doomed.child.kill('SIGKILL');
          await gate.release();
        }
        await exited;
        await Promise.all(inFlight);
        assert.deepEqual(Object.keys(await ordersOf(gated)), [], 'the killed requests left no order');
        const again = await startServer(dsn);
        try {
          const answers = {};
          await Promise.all(keys.map(async (key) => {
            await pollUntil(async () => {
              answers[key] = await post(again.url, `/${orm}/orders`, { key, body: bodyOf(key) });
              return answers[key].status !== 409;
            }, `${key} answered`);
          }));
          assert.deepEqual(keys.map((k) => answers[k].status), keys.map(() => 201));
          const orders = await ordersOf(keys);
          assert.ok(keys.every((key) => orders[key] === 1), `one order per key: ${JSON.stringify(orders)}`);
          const records = await sql("SELECT key, result ->> 'body' AS body FROM idempotent_record"
            + " WHERE key = ANY($1) AND status = 'succeeded'", [keys]);
          assert.equal(records.length, keys.length, 'one stored response per key');
          for (const { key, body } of records) assert.equal(answers[key].body.toString(), body);
        } finally {
          again.child.kill('SIGKILL');
        }
      });
    }
  });
}

// Every statement node-postgres sends from this process while fn runs
// (a pipeline of several statements is one round trip).
async function roundTrips(fn) {
  const sent = [];
  const { query } = pg.Client.prototype;
  pg.Client.prototype.query = function counted(config, ...rest) {
    sent.push(typeof config === 'string' ? config : config?.text ?? config?.steps?.map((s) => s.text).join(' + '));
    return query.call(this, config, ...rest);
  };
  try {
    await fn();
  } finally {
    pg.Client.prototype.query = query;
  }
  return sent;
}

describe('ORMs: round trips', () => {
  let app;
  before(async () => { app = await listenOrm(DIRECT); });
  after(() => app.close());

  test('an ORM write costs the round trips of the same write on req.idempotency.client, no more', async () => {
    for (const orm of ['raw', ...ORMS]) {
      await post(app.url, `/${orm}/orders`, { key: uniqueKey(`${orm}-warm`), body: { sku: 'warm' } }); // connect
    }
    const counts = {};
    for (const orm of ['raw', ...ORMS]) {
      const sent = await roundTrips(async () => {
        const r = await post(app.url, `/${orm}/orders`, { key: uniqueKey(`${orm}-count`), body: { sku: 'count' } });
        assert.equal(r.status, 201);
      });
      counts[orm] = sent;
    }
    assert.equal(counts.raw.length, 3, JSON.stringify(counts.raw)); // claim, INSERT, finish + COMMIT
    for (const orm of ORMS) {
      assert.equal(counts[orm].length, counts.raw.length, `${orm}: ${JSON.stringify(counts[orm])}`);
      // between the claim (BEGIN + idem_claim) and idem_finish + COMMIT: the ORM's INSERT alone
      assert.match(counts[orm][1], /^INSERT INTO /, `${orm} sends no transaction control of its own`);
    }
  });
});

// the README's example for orm (the block after <!-- orm-example: orm -->)
function readmeExample(orm) {
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  const at = readme.indexOf(`<!-- orm-example: ${orm} -->`);
  assert.ok(at >= 0, `README has the ${orm} example`);
  return readme.slice(at).match(/```js\n([\s\S]*?)```/)[1];
}

async function freePort() {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  return port;
}

for (const orm of ORMS) {
  test(`README: the ${orm} example runs as printed (one order, the retry replayed)`, async () => {
    // beside the tests' generated Prisma client (./generated/prisma)
    const file = `${here}orm/readme-${orm}.generated.mjs`;
    writeFileSync(file, readmeExample(orm));
    const port = await freePort();
    const child = spawn(process.execPath, [file], {
      env: { ...process.env, DATABASE_URL: DIRECT, PORT: String(port) }, stdio: ['ignore', 'inherit', 'inherit'],
    });
    try {
      const key = uniqueKey(`readme-${orm}`);
      const url = `http://127.0.0.1:${port}`;
      let first;
      await pollUntil(async () => {
        first = await post(url, '/orders', { key, body: { sku: key } }).catch(() => null);
        return first !== null;
      }, 'the example answers');
      assert.equal(first.status, 201, first.body.toString());
      const again = await post(url, '/orders', { key, body: { sku: key } });
      assert.deepEqual(json(again), json(first));
      assert.equal((await sql('SELECT count(*)::int AS n FROM orders WHERE sku = $1', [key]))[0].n, 1);
    } finally {
      child.kill('SIGKILL');
      rmSync(file, { force: true });
    }
  });
}
