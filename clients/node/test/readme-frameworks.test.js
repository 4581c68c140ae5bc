// The package README's NestJS and Hono examples run as printed: each block
// after a line "<!-- run by test/readme-frameworks.test.js -->" (and the
// NestJS example with its application made as the block after "<!-- run by
// test/readme-frameworks.test.js: the NestJS example ending this way -->"
// says: on the Fastify platform) is written into the
// package's folder (so that "pg-idempotency-key/..." resolves to this
// package), the TypeScript one compiled with TypeScript's transpileModule
// (decorators and their metadata as Nest projects compile them; it is
// type-checked too), started
// with PG* of the test database and PORT, and sent a request twice: 201,
// then the same bytes replayed; one order.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import ts from 'typescript';
import { parse } from 'pg-connection-string';
import {
  DIRECT, POOLED, pollUntil, setupDatabase, sql, uniqueKey,
} from './helpers.js';

await setupDatabase();
const packageDir = new URL('..', import.meta.url).pathname;
const readme = readFileSync(join(packageDir, 'README.md'), 'utf8');
const blocks = [...readme.matchAll(/<!-- run by test\/readme-frameworks\.test\.js -->\n```(\w+)\n([\s\S]*?)\n```/g)]
  .map(([, lang, code]) => ({ lang, code }));
// the NestJS example on the Fastify platform: its module and controllers,
// then the README's Fastify ending in place of its application
const [, ending] = readme.match(
  /<!-- run by test\/readme-frameworks\.test\.js: the NestJS example ending this way -->\n```ts\n([\s\S]*?)\n```/,
) ?? [];
const nestOnFastify = ending && {
  lang: 'ts', code: `${blocks[0].code.slice(0, blocks[0].code.indexOf('const app = await NestFactory.create('))}${ending}\n`,
};

const freePort = () => new Promise((resolve) => {
  const s = createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
});

// PG* variables the examples' new pg.Pool() reads
function pgEnvironment(dsn) {
  const c = parse(dsn);
  return { PGHOST: c.host, PGPORT: String(c.port ?? 5432), PGDATABASE: c.database, PGUSER: c.user ?? 'postgres' };
}

const compile = (code) => ts.transpileModule(code, {
  compilerOptions: {
    module: ts.ModuleKind.ESNext,
    target: ts.ScriptTarget.ES2022,
    experimentalDecorators: true,
    emitDecoratorMetadata: true,
  },
}).outputText;

test('the README has the NestJS (TypeScript) and Hono examples, and the NestJS one\'s Fastify ending', () => {
  assert.deepEqual(blocks.map((b) => b.lang), ['ts', 'js']);
  assert.ok(nestOnFastify && nestOnFastify.code.includes('new FastifyAdapter()'));
});

// the NestJS example (on both platforms) type-checked (strict) against the
// package's typings, as a project with @types/node and @types/pg would
for (const [platform, example] of [['Express', () => blocks[0]], ['Fastify', () => nestOnFastify]]) {
  test(`the README's NestJS example on ${platform} type-checks against nestjs.d.ts`, () => {
    const dir = mkdtempSync(join(packageDir, 'test', '.readme-'));
    try {
      const file = join(dir, 'app.mts');
      writeFileSync(file, example().code);
      const program = ts.createProgram([file], {
        noEmit: true,
        strict: true,
        skipLibCheck: true,
        module: ts.ModuleKind.NodeNext,
        moduleResolution: ts.ModuleResolutionKind.NodeNext,
        target: ts.ScriptTarget.ES2022,
        experimentalDecorators: true,
        emitDecoratorMetadata: true,
      });
      const errors = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
      assert.deepEqual(errors, []);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

const EXAMPLES = [['NestJS', () => blocks[0]], ['NestJS on Fastify', () => nestOnFastify], ['Hono', () => blocks[1]]];
for (const [name, example] of EXAMPLES) {
  for (const [target, dsn] of [['direct', DIRECT], ...(POOLED ? [['pgbouncer', POOLED]] : [])]) {
    test(`the README's ${name} example, ${target}: 201, then the replay; one order`, async () => {
      const { lang, code } = example();
      const dir = mkdtempSync(join(packageDir, 'test', '.readme-'));
      const file = join(dir, 'app.mjs');
      writeFileSync(file, lang === 'ts' ? compile(code) : code);
      const port = await freePort();
      const child = spawn(process.execPath, [file], {
        env: { ...process.env, ...pgEnvironment(dsn), PORT: String(port) }, stdio: ['ignore', 'inherit', 'inherit'],
      });
      const exited = once(child, 'exit');
      try {
        const url = `http://127.0.0.1:${port}/orders`;
        const key = uniqueKey(`readme-${name}-${target}`);
        const sku = key;
        const send = () => fetch(url, {
          method: 'POST', body: JSON.stringify({ sku }), headers: { 'content-type': 'application/json', 'idempotency-key': key },
        });
        await pollUntil(() => fetch(url, { method: 'OPTIONS' }).then(() => true, () => false), `${name} listening`);
        const first = await send();
        const firstBody = await first.text();
        assert.equal(first.status, 201, firstBody);
        const again = await send();
        assert.equal(again.status, 201);
        assert.equal(again.headers.get('idempotent-replayed'), 'true');
        assert.equal(await again.text(), firstBody);
        assert.equal((await sql('SELECT count(*)::int AS n FROM orders WHERE sku = $1', [sku]))[0].n, 1);
      } finally {
        child.kill('SIGKILL');
        await exited;
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
}
