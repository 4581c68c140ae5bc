// make bench, B9 large response: what storing one large response costs the
// app. One Express 5 app (a child process) answers POST /large/VARIANT with
// the same prebuilt body of BYTES bytes (UTF-8 text, or binary with --binary):
//   none     no idempotency: the HTTP transfer alone
//   floor    node-postgres alone: the body sent as one bytea parameter of a
//            bare INSERT into a table of its own, then answered
//   package  clients/node (maxResponseBytes raised above BYTES): the body
//            stored with idem_finish and COMMIT, then answered
//   replay   the package's replay of that stored response (the same request
//            again)
// The variants alternate within each round; the client (this process)
// sends one request at a time and measures its time to the last byte; the
// app measures its event loop's longest delay during the request
// (perf_hooks.monitorEventLoopDelay, 1 ms resolution): how long other
// requests of the app would have waited.
// Prints one line per variant: medians over ROUNDS, and the largest block.
//   node large.js PORT [--bytes N] [--rounds N] [--binary]   (BENCH_DSN)
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { createInterface } from 'node:readline';

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i < 0 ? fallback : args[i + 1];
};
const port = Number(args[0]);
const bytes = Number(option('--bytes', 20 * 1000 * 1000));
const rounds = Number(option('--rounds', 5));
const binary = args.includes('--binary');
const VARIANTS = ['none', 'floor', 'package', 'replay'];

// the body: JSON-like text, or bytes that are not UTF-8
function body() {
  if (binary) {
    const b = Buffer.alloc(bytes);
    for (let i = 0; i < bytes; i += 1) b[i] = (i * 2654435761) >>> 24;
    return b;
  }
  const unit = Buffer.from('{"sku": "sku-7", "qty": 1, "note": "a large response, stored for its replay"},\n');
  const b = Buffer.alloc(bytes);
  for (let i = 0; i < bytes; i += unit.length) unit.copy(b, i);
  return b;
}

async function app() {
  const { default: express } = await import('express');
  const { default: pg } = await import('pg');
  const { idempotency } = await import('../../clients/node/src/express.js');
  const pool = new pg.Pool({ connectionString: process.env.BENCH_DSN, max: 4 });
  await pool.query('CREATE TABLE IF NOT EXISTS bench_http_large (id bigserial PRIMARY KEY, body bytea)');
  const big = body();
  const type = binary ? 'application/octet-stream' : 'text/plain; charset=utf-8';
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  const a = express();
  a.get('/delay', (req, res) => {
    res.json({ max: delay.max / 1e6 });
    delay.reset();
  });
  a.post('/large/none', (req, res) => res.status(201).type(type).end(big));
  a.post('/large/floor', async (req, res) => {
    await pool.query('INSERT INTO bench_http_large (body) VALUES ($1)', [big]);
    res.status(201).type(type).end(big);
  });
  const idem = idempotency({ pool, scope: 'bench', maxResponseBytes: bytes + 1 });
  a.post('/large/package', idem, (req, res) => res.status(201).type(type).end(big));
  process.on('SIGTERM', () => process.exit(0));
  a.listen(port, '127.0.0.1', () => console.log(`listening on ${port}`));
}

function request(method, path, key) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const req = http.request({
      host: '127.0.0.1', port, path, method, agent: false, headers: key ? { 'idempotency-key': key } : {},
    }, (res) => {
      let size = 0;
      const chunks = [];
      res.on('data', (c) => { size += c.length; if (path === '/delay') chunks.push(c); });
      res.on('end', () => resolve({
        status: res.statusCode, size, seconds: Number(process.hrtime.bigint() - t0) / 1e9,
        replayed: res.headers['idempotent-replayed'] === 'true', text: Buffer.concat(chunks).toString(),
      }));
    });
    req.on('error', reject);
    req.end();
  });
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];

async function client() {
  const child = spawn(process.execPath, [new URL(import.meta.url).pathname, ...args, '--app'],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  await once(createInterface({ input: child.stdout }), 'line');
  const results = Object.fromEntries(VARIANTS.map((v) => [v, { seconds: [], block: [] }]));
  try {
    for (let round = 0; round < rounds; round += 1) {
      const key = `large-${process.pid}-${round}`;
      // the first variant of a round alternates
      const order = VARIANTS.slice(0, 3);
      for (let i = 0; i < round % 3; i += 1) order.push(order.shift());
      order.push('replay'); // after package, which stored it
      for (const v of order) {
        await request('GET', '/delay');
        const path = v === 'replay' ? '/large/package' : `/large/${v}`;
        const r = await request('POST', path, v === 'package' || v === 'replay' ? key : null);
        const { max } = JSON.parse((await request('GET', '/delay')).text);
        if (r.status !== 201 || r.size !== bytes || (v === 'replay') !== r.replayed) {
          throw new Error(`${v}: status ${r.status}, ${r.size} bytes, replayed ${r.replayed}`);
        }
        results[v].seconds.push(r.seconds);
        results[v].block.push(max);
      }
    }
  } finally {
    child.kill();
  }
  for (const v of VARIANTS) {
    const { seconds, block } = results[v];
    console.log(`${v} bytes=${bytes} binary=${binary} seconds=${median(seconds).toFixed(3)}`
      + ` block_ms=${median(block).toFixed(0)} block_max_ms=${Math.max(...block).toFixed(0)}`
      + ` runs=${seconds.map((s) => s.toFixed(2)).join(',')} blocks=${block.map((b) => b.toFixed(0)).join(',')}`);
  }
}

if (args.includes('--app')) await app(); else await client();
