// The package as a user installs it: npm pack, the tarball installed with
// express and pg (no Fastify) into a new app, which imports the main entry,
// the Express entry and package.json, and sends a request end to end.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { DIRECT, setupDatabase, sql, uniqueKey } from './helpers.js';

await setupDatabase();
const packageDir = new URL('..', import.meta.url).pathname;
// the versions the suite installed (npm ci): in npm's cache already
const versionOf = (name) => JSON.parse(readFileSync(join(packageDir, 'node_modules', name, 'package.json'))).version;

const APP = `
import { createRequire } from 'node:module';
import express from 'express';
import pg from 'pg';
import { expressIdempotency as fromMain } from 'pg-idempotency-key';
import { expressIdempotency } from 'pg-idempotency-key/express';

const { version } = createRequire(import.meta.url)('pg-idempotency-key/package.json');
const [dsn, key] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: dsn, max: 2 });
const app = express();
app.use(express.json());
// the principal an authentication layer established
app.use((req, res, next) => { req.user = { account: 'pack-test' }; next(); });
app.post('/orders', expressIdempotency({ pool, scope: (req) => req.user.account }), async (req, res) => {
  const { rows } = await req.idempotency.client.query(
    'INSERT INTO orders (idempotency_key, sku) VALUES ($1, $2) RETURNING id', [req.idempotency.key, req.body.sku]);
  res.status(201).json({ order_id: rows[0].id });
});
const server = app.listen(0, '127.0.0.1', async () => {
  const url = 'http://127.0.0.1:' + server.address().port + '/orders';
  const send = () => fetch(url, { method: 'POST', body: '{"sku":"p"}',
    headers: { 'content-type': 'application/json', 'idempotency-key': key } });
  const first = await send();
  const again = await send();
  console.log(JSON.stringify({ version, main: typeof fromMain, statuses: [first.status, again.status],
    replayed: again.headers.get('idempotent-replayed'), same: (await first.text()) === (await again.text()) }));
  server.close();
  await pool.end();
});
`;

test('npm pack, installed with express and pg into a new app: a request end to end', { timeout: 600000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'pg-idempotency-key-app-'));
  try {
    execFileSync('npm', ['pack', '--pack-destination', dir, '--silent'], { cwd: packageDir, stdio: 'pipe' });
    const tarball = readdirSync(dir).find((f) => f.endsWith('.tgz'));
    assert.ok(tarball, 'npm pack made a tarball');
    writeFileSync(join(dir, 'package.json'), JSON.stringify({
      name: 'pack-test-app',
      private: true,
      type: 'module',
      dependencies: { 'pg-idempotency-key': `file:./${tarball}`, express: versionOf('express'), pg: versionOf('pg') },
    }));
    execFileSync('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'],
      { cwd: dir, stdio: 'pipe' });
    assert.deepEqual(readdirSync(join(dir, 'node_modules')).filter((n) => /fastify/.test(n)), [], 'no Fastify installed');
    writeFileSync(join(dir, 'app.js'), APP);
    const key = uniqueKey('pack');
    const out = JSON.parse(execFileSync(process.execPath, ['app.js', DIRECT, key], { cwd: dir, encoding: 'utf8' }));
    assert.deepEqual(out, {
      version: JSON.parse(readFileSync(join(packageDir, 'package.json'))).version,
      main: 'function',
      statuses: [201, 201],
      replayed: 'true',
      same: true,
    });
    assert.equal((await sql('SELECT count(*)::int AS n FROM orders WHERE idempotency_key = $1', [key]))[0].n, 1);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
