// make bench, B9 fault rows, for the app of one variant:
//   kill   a duplicate storm (50 concurrent clients, each key sent 5 times);
//          the app killed with kill -9 once it answered ANSWERS requests and
//          restarted
//   redis  the same storm; Redis killed with kill -9 and restarted (the
//          executable BENCH_REDIS_RESTART) once the app answered ANSWERS
//          requests; the storm goes on for ANSWERS more answers (the app is
//          restarted if it died)
//   throw  THROWN keys sent once each to POST /orders/throw, whose handler
//          fails after its insert the first time it sees a key
// then every key sent is retried (honouring Retry-After, at most RETRIES
// times) as a client would.
// Prints: keys=N effects=N duplicated=N unanswered=N stuck=N failed=N crashed=N
//   duplicated  keys with 2+ business rows
//   unanswered  keys with a business row whose retry got no 2xx
//   stuck       of those, keys still answered 409 after every retry
//   failed      of those, keys still answered 5xx after every retry
//   crashed     1 if the app process died on its own (redis)
// node fault.js VARIANT PORT TAG [kill|redis|throw]   (BENCH_DSN, BENCH_REDIS_URL)
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import { createInterface } from 'node:readline';
import pg from 'pg';

const [variant, port, tag, mode = 'kill'] = process.argv.slice(2);
const CLIENTS = 50;
const COPIES = 5;
const ANSWERS = 1000;
const THROWN = 100;
const RETRIES = 5;
const PATH = mode === 'throw' ? '/orders/throw' : '/orders';
const body = JSON.stringify({ sku: 'sku-7', qty: 1 });

// the variant's app, once it listens (python, python-asyncpg:
// clients/python's ASGI middleware under uvicorn, asgi_app.py, which says
// so on stderr once its socket is bound: "Application startup complete"
// comes before)
async function start() {
  if (!variant.startsWith('python')) {
    const child = spawn(process.execPath, [new URL('./app.js', import.meta.url).pathname, variant, port],
      { stdio: ['ignore', 'pipe', 'ignore'] });
    await once(createInterface({ input: child.stdout }), 'line');
    return child;
  }
  const here = new URL('.', import.meta.url).pathname;
  const child = spawn('/usr/bin/python3', ['-m', 'uvicorn', '--app-dir', here, 'asgi_app:app',
    '--host', '127.0.0.1', '--port', port, '--loop', 'uvloop', '--http', 'httptools', '--no-access-log'],
  {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, PYTHONPATH: `${here}../../clients/python/src`, BENCH_VARIANT: variant },
  });
  for await (const line of createInterface({ input: child.stderr })) {
    if (line.includes('Uvicorn running on')) break;
  }
  child.stderr.resume(); // read on, so that a full pipe never blocks it
  return child;
}

function post(key) {
  return new Promise((resolve) => {
    const req = http.request({
      host: '127.0.0.1', port, path: PATH, method: 'POST', agent: false,
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

const keyOf = (i) => `${tag}-${Math.floor(i / (mode === 'throw' ? 1 : COPIES))}`;
let next = 0;
let answered = 0;
let stopped = false;
let crashed = 0;
const first = await start();
const firstExited = new Promise((resolve) => {
  first.on('exit', (code, signal) => {
    if (signal !== 'SIGKILL') crashed = 1;
    resolve();
  });
});
const restartRedis = () => new Promise((resolve, reject) => {
  execFile(process.env.BENCH_REDIS_RESTART, (err) => (err ? reject(err) : resolve()));
});
let redisRestarted;
if (mode === 'throw') {
  await Promise.all(Array.from({ length: 10 }, async () => {
    while (next < THROWN) await post(keyOf(next++));
  }));
} else {
  await Promise.all(Array.from({ length: CLIENTS }, async () => {
    while (!stopped) {
      const r = await post(keyOf(next++));
      if (r.status === 0 && mode === 'redis' && crashed) break;
      if (r.status === 0 || ++answered < ANSWERS) continue;
      if (mode === 'kill') {
        stopped = true;
        first.kill('SIGKILL');
      } else if (answered === ANSWERS) {
        redisRestarted = restartRedis();
      } else if (answered >= 2 * ANSWERS) {
        stopped = true;
      }
    }
  }));
  await redisRestarted;
}
if (mode === 'kill' || crashed) await firstExited;
const keys = [...new Set(Array.from({ length: next }, (_, i) => keyOf(i)))];

const again = mode === 'kill' || crashed ? await start() : first;
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
  + ` stuck=${unanswered.filter((r) => finals.get(r.key) === 409).length}`
  + ` failed=${unanswered.filter((r) => finals.get(r.key) >= 500).length} crashed=${crashed}`);
process.exit(0);
