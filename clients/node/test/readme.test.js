// The README's ORM examples run as printed: each ```js block after a line
// "<!-- tested by test/readme.test.js -->" is written to a folder inside
// the package (so that it imports pg-idempotency-key/... by the package's
// name) and run with DATABASE_URL and PORT, directly and through PgBouncer;
// a key sent twice places one order and is replayed.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, test } from 'node:test';
import {
  DIRECT, POOLED, json, pollUntil, post, setupDatabase, sql, uniqueKey,
} from './helpers.js';

await setupDatabase();
const packageDir = new URL('..', import.meta.url).pathname;
const readme = readFileSync(join(packageDir, 'README.md'), 'utf8');
const blocks = [...readme.matchAll(/<!-- tested by test\/readme\.test\.js -->\n```js\n([\s\S]*?)\n```/g)]
  .map((m) => m[1]);
const dir = mkdtempSync(join(packageDir, '.readme-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const freePort = () => new Promise((resolve) => {
  const s = createServer().listen(0, '127.0.0.1', () => {
    const { port } = s.address();
    s.close(() => resolve(port));
  });
});

test('the README has the tested examples of Knex, Kysely and Drizzle', () => {
  assert.deepEqual(blocks.map((b) => /from 'pg-idempotency-key\/(knex|kysely|drizzle)'/.exec(b)?.[1]),
    ['knex', 'kysely', 'drizzle']);
});

const targets = [['direct', DIRECT], ...(POOLED ? [['pgbouncer', POOLED]] : [])];
for (const [target, dsn] of targets) {
  for (const [i, block] of blocks.entries()) {
    const orm = /pg-idempotency-key\/(\w+)'/.exec(block.split('\n').filter((l) => /\/(knex|kysely|drizzle)'/.test(l))[0])[1];
    test(`README, ${orm}, ${target}: runs as printed; a key sent twice places one order and is replayed`, async () => {
      const file = join(dir, `${orm}.mjs`);
      writeFileSync(file, block);
      const port = await freePort();
      const child = spawn(process.execPath, [file], {
        env: { ...process.env, DATABASE_URL: dsn, PORT: String(port) }, stdio: ['ignore', 'inherit', 'inherit'],
      });
      try {
        const url = `http://127.0.0.1:${port}`;
        const key = uniqueKey(`readme-${orm}`);
        const sku = `readme-${orm}-${target}-${i}-${key}`;
        let first;
        await pollUntil(async () => {
          if (child.exitCode !== null) throw new Error(`the ${orm} example exited (${child.exitCode})`);
          first = await post(url, '/orders', { key, body: { sku } }).catch(() => null);
          return first !== null;
        }, `${orm} example listening`);
        const again = await post(url, '/orders', { key, body: { sku } });
        assert.equal(first.status, 201, first.body.toString());
        assert.equal(again.status, 201);
        assert.equal(again.headers['idempotent-replayed'], 'true');
        assert.equal(again.body.toString(), first.body.toString());
        const rows = await sql('SELECT id FROM orders WHERE sku = $1', [sku]);
        assert.equal(rows.length, 1);
        assert.equal(String(json(first).order_id), String(rows[0].id));
      } finally {
        if (child.exitCode === null) {
          child.kill('SIGKILL');
          await once(child, 'exit');
        }
      }
    });
  }
}
