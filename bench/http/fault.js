// make bench, B9 fault row: the app of one variant under a duplicate storm
// (50 concurrent clients, each key sent 5 times), killed with kill -9 once
// it answered ANSWERS requests, restarted, then every key sent is retried
// (honouring Retry-After, at most RETRIES times) as a client would.
// Prints: keys=N effects=N duplicated=N unanswered=N stuck=N
//   duplicated  keys with 2+ business rows
//   unanswered  keys with a business row whose retry got no 2xx
//   stuck       of those, keys still answered 409 after every retry
// node fault.js VARIANT PORT TAG   (BENCH_DSN, BENCH_REDIS_URL)
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import { createInterface } from 'node:readline';
import pg from 'pg';

const [variant, port, tag] = process.argv.slice(2);
const CLIENTS = 50;
const COPIES = 5;
const ANSWERS = 1000;
const RETRIES = 5;
const body = JSON.stringify({ sku: 'sku-7', qty: 1 });

async function start() {
  const child = spawn(process.execPath, [new URL('./app.js', import.meta.url).pathname, variant, port],
    { stdio: ['ignore', 'pipe', 'ignore'] });
  await once(createInterface({ input: child.stdout }), 'line');
  return child;
}

function post(key) {
  return new Promise((resolve) => {
    const req = http.request({
      host: '127.0.0.1', port, path: '/orders', method: 'POST', agent: false,
      headers: { 'content-type': 'application/json', 'idempotency-key': key, 'content-length': Buffer.byteLength(body) },
    }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode, retryAfter: Number(res.headers['retry-after'] ?? 1) }));
      res.on('error', () => resolve({ status: 0 }));
    });
    req.on('error', () => resolve({ status: 0 }));
    req.end(body);
  });
}

const keyOf = (i) => `${tag}-${Math.floor(i / COPIES)}`;
let next = 0;
let answered = 0;
let killed = false;
const doomed = await start();
await Promise.all(Array.from({ length: CLIENTS }, async () => {
  while (!killed) {
    const r = await post(keyOf(next++));
    if (r.status !== 0 && ++answered >= ANSWERS && !killed) {
      killed = true;
      doomed.kill('SIGKILL');
    }
  }
}));
await once(doomed, 'exit').catch(() => {});
const keys = [...new Set(Array.from({ length: next }, (_, i) => keyOf(i)))];

const again = await start();
const finals = new Map();
let cursor = 0;
await Promise.all(Array.from({ length: 10 }, async () => {
  while (cursor < keys.length) {
    const key = keys[cursor++];
    let r;
    for (let attempt = 0; attempt < RETRIES; attempt++) {
      r = await post(key);
      if (r.status !== 409) break;
      await new Promise((resolve) => setTimeout(resolve, 1000 * Math.min(r.retryAfter, 2)));
    }
    finals.set(key, r.status);
  }
}));
again.kill('SIGKILL');

const db = new pg.Client(process.env.BENCH_DSN);
await db.connect();
const { rows } = await db.query(
  'SELECT idempotency_key AS key, count(*)::int AS n FROM bench_http_order WHERE idempotency_key LIKE $1 GROUP BY 1',
  [`${tag}-%`],
);
await db.end();
const withEffect = rows.filter((r) => finals.has(r.key));
const unanswered = withEffect.filter((r) => !(finals.get(r.key) >= 200 && finals.get(r.key) < 300));
console.log(`keys=${keys.length} effects=${withEffect.length}`
  + ` duplicated=${rows.filter((r) => r.n > 1).length} unanswered=${unanswered.length}`
  + ` stuck=${unanswered.filter((r) => finals.get(r.key) === 409).length}`);
process.exit(0);
