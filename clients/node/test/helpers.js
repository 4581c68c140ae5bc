// Shared by the test files: the databases (IDEM_TEST_DSN, direct;
// IDEM_TEST_POOLED_DSN, through PgBouncer in transaction pooling), raw HTTP
// requests, and polling of the database for a condition.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import { createInterface } from 'node:readline';
import pg from 'pg';

export const DIRECT = process.env.IDEM_TEST_DSN;
export const POOLED = process.env.IDEM_TEST_POOLED_DSN;
if (!DIRECT) throw new Error('set IDEM_TEST_DSN (scripts/test.sh does)');

// the targets every behaviour is checked on
// [name, DSN, middleware options]; prepared statements only on a direct
// connection (a transaction-pooling PgBouncer cannot keep them)
export const TARGETS = [
  ['direct', DIRECT, {}],
  ['direct, prepared statements', DIRECT, { prepare: true }],
  ...(POOLED ? [['pgbouncer', POOLED, {}]] : []),
];
// (IDEM_TEST_FRAMEWORKS=nestjs,hono: some of them only, by hand)
export const FRAMEWORKS = process.env.IDEM_TEST_FRAMEWORKS?.split(',')
  ?? ['express5', 'express4', 'fastify', 'nestjs', 'nestjs-fastify', 'hono'];
// the frameworks where a 40001/40P01 re-runs the request itself; Hono
// answers 503 retry at once (a middleware cannot run the chain again)
export const RERUNS = new Set(['express5', 'express4', 'fastify', 'nestjs', 'nestjs-fastify']);

export async function setupDatabase() {
  const c = new pg.Client(DIRECT);
  await c.connect();
  await c.query(`CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY,
                 idempotency_key text, tenant text, sku text)`);
  // a row here makes COMMIT fail with a real 40001 (a deferred trigger)
  await c.query(`CREATE TABLE IF NOT EXISTS commit_conflict (key text);
    CREATE OR REPLACE FUNCTION commit_conflict() RETURNS trigger LANGUAGE plpgsql AS
      $$ BEGIN RAISE EXCEPTION 'conflict at commit' USING ERRCODE = '40001'; END $$;
    DROP TRIGGER IF EXISTS commit_conflict ON commit_conflict;
    CREATE CONSTRAINT TRIGGER commit_conflict AFTER INSERT ON commit_conflict
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION commit_conflict()`);
  await c.end();
}

export async function sql(text, params) {
  const c = new pg.Client(DIRECT);
  await c.connect();
  try {
    return (await c.query(text, params)).rows;
  } finally {
    await c.end();
  }
}

// -> {status, headers, body (Buffer)}
export function post(url, path, { key, body = {}, tenant, type = 'application/json' } = {}) {
  const data = Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
  const headers = { 'content-type': type, 'content-length': data.length };
  if (key !== undefined) headers['idempotency-key'] = key;
  if (tenant !== undefined) headers['x-tenant'] = tenant;
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}${path}`, { method: 'POST', headers, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(data);
  });
}

export const json = (answer) => JSON.parse(answer.body.toString());

// polls the database (no timing assumption) until sql returns true
export const until = (text, params) => pollUntil(async () => Object.values((await sql(text, params))[0])[0], text);

// calls condition() until it is true (no timing assumption)
export async function pollUntil(condition, what) {
  for (let i = 0; i < 2400; i++) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`never true: ${what}`);
}

// The gate: held by the test on a session of its own; a request with
// {"gate": true} waits for it inside its transaction.
export async function holdGate(gate) {
  const c = new pg.Client(DIRECT);
  await c.connect();
  await c.query('SELECT pg_advisory_lock($1)', [gate]);
  return { release: () => c.end() };
}

export const waitersAtGate = (gate, n) => until(
  "SELECT count(*) >= $2 FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND NOT granted",
  [gate, n],
);

export const ordersOf = async (keys) => Object.fromEntries((await sql(
  'SELECT idempotency_key, count(*)::int AS n FROM orders WHERE idempotency_key = ANY($1) GROUP BY 1', [keys],
)).map((r) => [r.idempotency_key, r.n]));

export const uniqueKey = (() => {
  let n = 0;
  const run = `${process.pid}-${Date.now()}`;
  return (label) => `${label}-${run}-${++n}`;
})();

// the test application as a process of its own (server.js): {child, url}
export async function startServer(dsn, framework) {
  const child = spawn(process.execPath, [new URL('./server.js', import.meta.url).pathname, dsn, framework],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  const [url] = await once(createInterface({ input: child.stdout }), 'line');
  return { child, url };
}
