// The ORM test application (Express 5): the same routes for Knex, Kysely
// and Drizzle, each writing through the ORM's transaction bound to the
// claim (pg-idempotency-key/knex, /kysely, /drizzle), next to its global
// instance on a pool of its own, as an application has it.
//   POST /:orm/orders   one order; {"gate": true}: then waits for the
//                       test's advisory lock (GATE) inside the transaction
//   POST /:orm/fail     one order, then throws
//   POST /:orm/global   one order through the transaction, one through the
//                       global instance; {"fail": true}: then throws
//   POST /:orm/end      one order, then the ORM's own commit or rollback
//                       ({"how": "commit" | "rollback" | "transaction"})
//   POST /:orm/raise    raises SQLSTATE body.code through the ORM (40001
//                       the first time a key is seen only)
//   POST /raw/raise     the same through req.idempotency.client
// Fastify, POST /all/orders: one order through each of the three ORMs in
// the one request ({"fail": true}: then throws)
export async function listenFastify(dsn) {
  const pool = new pg.Pool({ connectionString: dsn, max: 10 });
  const o = ormsOver(dsn);
  const app = Fastify();
  await app.register(fastifyIdempotency, { pool, scope: 'orm-tests' });
  app.post('/all/orders', async (request, reply) => {
    const ids = [];
    for (const orm of ORMS) {
      ids.push(Number(await o[orm].insert(await o[orm].trx(request.idempotency), request.idempotency.key, orm)));
    }
    if (request.body.fail) throw new Error('the handler failed after its inserts');
    return reply.code(201).send({ ids });
  });
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    url,
    close: async () => {
      await app.close();
      await Promise.all([pool.end(), ...Object.values(o).map((x) => x.close())]);
    },
  };
}

// The server's statement log of a request ({"log": true}: log_statement
// all, sent to the client, for the rest of the claim's transaction) is
// kept in statementLog (key -> statements).
import express from 'express';
import Fastify from 'fastify';
import knexFactory from 'knex';
import { Kysely, PostgresDialect, sql as ksql } from 'kysely';
import { drizzle } from 'drizzle-orm/node-postgres';
import { sql as dsql } from 'drizzle-orm';
import { bigserial, pgTable, text } from 'drizzle-orm/pg-core';
import pg from 'pg';
import { expressIdempotency } from '../../src/express.js';
import { fastifyIdempotency } from '../../src/fastify.js';
import { knexTransaction } from '../../src/orm/knex.js';
import { kyselyTransaction } from '../../src/orm/kysely.js';
import { drizzleDatabase } from '../../src/orm/drizzle.js';

export const GATE = 7402;
export const ORMS = ['knex', 'kysely', 'drizzle'];
export const statementLog = new Map();

const orders = pgTable('orders', {
  id: bigserial('id', { mode: 'number' }).primaryKey(),
  idempotencyKey: text('idempotency_key'),
  tenant: text('tenant'),
  sku: text('sku'),
});

// the SQLSTATE of a raise route, set as a transaction-local setting (no SQL
// text built from the request)
const RAISE = "DO $$ BEGIN RAISE EXCEPTION 'raised by the test' USING ERRCODE = current_setting('test.code'); END $$";
const conflicted = new Set();

// each ORM: its global instance and what the routes do with it
function ormsOver(dsn) {
  const knex = knexFactory({ client: 'pg', connection: { connectionString: dsn }, pool: { min: 0, max: 4 } });
  const kysely = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: dsn, max: 4 }) }) });
  const dpool = new pg.Pool({ connectionString: dsn, max: 4 });
  const db = drizzle(dpool);
  return {
    knex: {
      trx: (idem) => knexTransaction(idem, knex),
      insert: async (t, key, sku) => (await t('orders').insert({ idempotency_key: key, sku }).returning('id'))[0].id,
      raw: (t, text, values = []) => t.raw(text.replace(/\$\d+/g, '?'), values),
      end: (t, how) => (how === 'commit' ? t.commit() : how === 'rollback' ? t.rollback()
        : knex.transaction((inner) => inner.raw('SELECT 1')).then(() => t.commit())),
      global: knex,
      close: () => knex.destroy(),
    },
    kysely: {
      trx: (idem) => kyselyTransaction(idem),
      insert: async (t, key, sku) => Number((await t.insertInto('orders').values({ idempotency_key: key, sku })
        .returning('id').executeTakeFirstOrThrow()).id),
      raw: (t, text, values = []) => ksql.raw(text.replace(/\$(\d+)/g, (m, n) => `'${String(values[n - 1]).replace(/'/g, "''")}'`)).execute(t),
      end: (t, how) => (how === 'commit' ? t.commit().execute() : how === 'rollback' ? t.rollback().execute()
        : t.savepoint('s').execute().then((s) => s.releaseSavepoint('s').execute()).then(() => t.commit().execute())),
      global: kysely,
      close: () => kysely.destroy(),
    },
    drizzle: {
      trx: (idem) => drizzleDatabase(idem),
      insert: async (t, key, sku) => (await t.insert(orders).values({ idempotencyKey: key, sku })
        .returning({ id: orders.id }))[0].id,
      raw: (t, text, values = []) => t.execute(dsql.raw(text.replace(/\$(\d+)/g, (m, n) => `'${String(values[n - 1]).replace(/'/g, "''")}'`))),
      end: (t, how) => (how === 'transaction' ? t.transaction(async (tx) => { await tx.execute(dsql`SELECT 1`); })
        : t.execute(how === 'commit' ? dsql`COMMIT` : dsql`ROLLBACK`)),
      global: db,
      close: () => dpool.end(),
    },
  };
}

// inserts through an ORM's global instance, outside any request
export async function globalInsert(o, orm, key, sku) {
  if (orm === 'knex') return o.knex.global('orders').insert({ idempotency_key: key, sku });
  if (orm === 'kysely') return o.kysely.global.insertInto('orders').values({ idempotency_key: key, sku }).execute();
  return o.drizzle.global.insert(orders).values({ idempotencyKey: key, sku });
}

// the server's log of the statements run in the rest of the claim's
// transaction, read from the LOG messages it sends on the claim's client
async function logStatements(idem) {
  const client = await idem.begin();
  const statements = [];
  statementLog.set(idem.key, statements);
  client.on('notice', (msg) => {
    const m = /^(?:statement|execute [^:]*): ([\s\S]*)$/.exec(msg.message);
    if (msg.severity === 'LOG' && m) statements.push(m[1]);
  });
  await client.query("SELECT set_config('log_statement', 'all', true), set_config('client_min_messages', 'log', true)");
}

export async function listen(dsn, { options = {}, onPool } = {}) {
  const pool = new pg.Pool({ connectionString: dsn, max: 10 });
  if (onPool) onPool(pool);
  const o = ormsOver(dsn);
  const app = express();
  app.use(express.json());
  // the tests' stand-in for the principal an authentication layer sets
  app.use((req, res, next) => { req.user = { account: 'orm-tests' }; next(); });
  const idempotent = expressIdempotency({ pool, scope: (req) => req.user.account, ...options });
  app.post('/raw/raise', idempotent, async (req, res) => {
    const { client } = req.idempotency;
    const { rows } = await client.query('INSERT INTO orders (idempotency_key, sku) VALUES ($1, $2) RETURNING id',
      [req.idempotency.key, 'raise']);
    await client.query("SELECT set_config('test.code', $1, true)", [req.body.code]);
    if (req.body.code !== '40001' || !conflicted.has(`raw:${req.idempotency.key}`)) {
      conflicted.add(`raw:${req.idempotency.key}`);
      await client.query(RAISE);
    }
    res.status(201).json({ order_id: Number(rows[0].id) });
  });
  const route = (path, handle) => app.post(`/:orm${path}`, idempotent, async (req, res) => {
    const orm = o[req.params.orm];
    if (req.body.log) await logStatements(req.idempotency);
    const t = await orm.trx(req.idempotency);
    await handle(orm, t, req, res);
  });
  route('/orders', async (orm, t, req, res) => {
    const id = await orm.insert(t, req.idempotency.key, req.body.sku ?? null);
    if (req.body.gate) await orm.raw(t, `SELECT pg_advisory_xact_lock_shared(${GATE})`);
    res.status(201).json({ order_id: Number(id), sku: req.body.sku ?? null });
  });
  route('/fail', async (orm, t, req) => {
    await orm.insert(t, req.idempotency.key, 'fail');
    throw new Error('the handler failed after its insert');
  });
  route('/global', async (orm, t, req, res) => {
    const id = await orm.insert(t, req.idempotency.key, 'trx');
    await globalInsert(o, req.params.orm, req.idempotency.key, 'global');
    if (req.body.fail) throw new Error('the handler failed after its inserts');
    res.status(201).json({ order_id: Number(id) });
  });
  route('/end', async (orm, t, req, res) => {
    await orm.insert(t, req.idempotency.key, 'end');
    await orm.end(t, req.body.how);
    res.status(201).json({ ended: req.body.how });
  });
  route('/raise', async (orm, t, req, res) => {
    const id = await orm.insert(t, req.idempotency.key, 'raise');
    await orm.raw(t, "SELECT set_config('test.code', $1, true)", [req.body.code]);
    if (req.body.code !== '40001' || !conflicted.has(`${req.params.orm}:${req.idempotency.key}`)) {
      conflicted.add(`${req.params.orm}:${req.idempotency.key}`);
      await orm.raw(t, RAISE);
    }
    res.status(201).json({ order_id: Number(id) });
  });
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    orms: o,
    close: async () => {
      await new Promise((resolve) => server.close(resolve));
      await Promise.all([pool.end(), ...Object.values(o).map((x) => x.close())]);
    },
  };
}
