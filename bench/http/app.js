// make bench, B9: the same Express 5 app, POST /orders (one business row,
// 201), with one of four idempotency variants, each written as its README
// shows:
//   none                 no idempotency
//   express-idempotency  express-idempotency + express-idempotency-redis-adapter
//   node-idempotency     @node-idempotency/core + its Redis storage adapter,
//                        glued into Express as the core's README shows
//                        (@node-idempotency/express is not on the npm registry)
//   package              this repository's clients/node (pg-idempotency-key),
//                        prepare: true (the app connects directly);
//                        package-wait: the same, duplicates polling up to 10 s
// and two references for new keys, the package's transaction shape with
// less work in it (one pooled connection, three round trips):
//   round-trips          BEGIN with a one-row SELECT, the insert, a one-row
//                        SELECT with COMMIT: no idempotency work at all
//   hand-record          the least record a hand-written middleware keeps in
//                        the same transaction: BEGIN with INSERT ... ON
//                        CONFLICT DO NOTHING of the key and body, the insert,
//                        UPDATE of the record with the response and COMMIT
//                        (no fence, expiry, in-flight answer or fingerprint
//                        check: a duplicate waits on the primary key)
// POST /orders/throw is the same handler throwing after its insert the
// first time a key is seen (fault.js, "handler throws").
// node app.js VARIANT PORT   (BENCH_DSN, BENCH_REDIS_URL); pg pool of 10.
import express from 'express';
import pg from 'pg';
import { idempotency as expressIdempotency } from '../../clients/node/src/express.js';

const [variant, port] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: process.env.BENCH_DSN, max: 10 });
const app = express();
app.use(express.json());

const INSERT = 'INSERT INTO bench_http_order (idempotency_key, sku, qty) VALUES ($1, $2, $3) RETURNING id';
const orderBody = (id, body) => ({ order_id: id, sku: body.sku, qty: body.qty });
const thrownOnce = new Set();
// after the insert: a handler that fails the first time it sees a key
function failOnce(path, key) {
  if (path !== '/orders/throw' || thrownOnce.has(key)) return;
  thrownOnce.add(key);
  throw new Error('the handler failed after its insert');
}
const ROUTES = ['/orders', '/orders/throw'];

if (variant === 'none' || variant === 'express-idempotency') {
  let service = null;
  if (variant === 'express-idempotency') {
    const { idempotency, getSharedIdempotencyService } = await import('express-idempotency');
    // a CommonJS module whose class is its "default" export
    const RedisAdapter = (await import('express-idempotency-redis-adapter')).default.default;
    const adapter = new RedisAdapter({ connectionConfig: { url: process.env.BENCH_REDIS_URL } });
    await adapter.connect();
    app.use(idempotency({ dataAdapter: adapter }));
    service = getSharedIdempotencyService();
  }
  app.post(ROUTES, async (req, res) => {
    if (service && service.isHit(req)) return;
    const { rows } = await pool.query(INSERT, [req.get('idempotency-key') ?? null, req.body.sku, req.body.qty]);
    failOnce(req.path, req.get('idempotency-key'));
    res.status(201).json(orderBody(rows[0].id, req.body));
  });
} else if (variant === 'node-idempotency') {
  const { Idempotency, IdempotencyErrorCodes: Codes } = await import('@node-idempotency/core');
  const { RedisStorageAdapter } = await import('@node-idempotency/storage-adapter-redis');
  const storage = new RedisStorageAdapter({ url: process.env.BENCH_REDIS_URL });
  await storage.connect();
  const idempotency = new Idempotency(storage, {});
  const statusOf = {
    [Codes.IDEMPOTENCY_KEY_MISSING]: 400,
    [Codes.IDEMPOTENCY_KEY_LEN_EXEEDED]: 400,
    [Codes.IDEMPOTENCY_FINGERPRINT_MISSMATCH]: 422,
    [Codes.REQUEST_IN_PROGRESS]: 409,
  };
  app.post(ROUTES, async (req, res) => {
    const request = { headers: req.headers, body: req.body, path: req.path, method: req.method };
    try {
      const cached = await idempotency.onRequest(request);
      if (cached) return res.status(cached.additional.status).json(cached.body ?? { error: cached.error });
    } catch (err) {
      return res.status(statusOf[err.code] ?? 500).json({ error: err.code });
    }
    let body;
    try {
      const { rows } = await pool.query(INSERT, [req.get('idempotency-key'), req.body.sku, req.body.qty]);
      failOnce(req.path, req.get('idempotency-key'));
      body = orderBody(rows[0].id, req.body);
    } catch (err) {
      // the README's way: the error is the response stored
      await idempotency.onResponse(request, { error: err.message, additional: { status: 500 } });
      return res.status(500).json({ error: err.message });
    }
    await idempotency.onResponse(request, { body, additional: { status: 201 } });
    return res.status(201).json(body);
  });
} else if (variant === 'package' || variant === 'package-wait') {
  // a direct connection: the claim and idem_finish as prepared statements;
  // one scope for every caller, as the Redis variants have (no principal)
  const idem = expressIdempotency({
    pool, scope: 'bench', prepare: true, waitFor: variant === 'package-wait' ? 10000 : 0,
  });
  app.post(ROUTES, idem, async (req, res) => {
    const { rows } = await req.idempotency.client.query(INSERT, [req.idempotency.key, req.body.sku, req.body.qty]);
    failOnce(req.path, req.idempotency.key);
    res.status(201).json(orderBody(rows[0].id, req.body));
  });
} else if (variant === 'round-trips' || variant === 'hand-record') {
  const lit = (v) => pg.Client.prototype.escapeLiteral(String(v));
  const claimSql = (key, body) => (variant === 'round-trips' ? "BEGIN; SELECT 'claimed'"
    : `BEGIN; INSERT INTO bench_http_hand_record (key, request) VALUES (${lit(key)}, ${lit(JSON.stringify(body))})`
      + " ON CONFLICT DO NOTHING RETURNING 'claimed'");
  const finishSql = (key, response) => (variant === 'round-trips' ? "SELECT 'finished'; COMMIT"
    : `UPDATE bench_http_hand_record SET status = 201, response = ${lit(JSON.stringify(response))}`
      + ` WHERE key = ${lit(key)}; COMMIT`);
  app.post('/orders', async (req, res) => {
    const key = req.get('idempotency-key');
    const client = await pool.connect();
    try {
      await client.query(claimSql(key, req.body));
      const { rows } = await client.query(INSERT, [key, req.body.sku, req.body.qty]);
      const body = orderBody(rows[0].id, req.body);
      await client.query(finishSql(key, body));
      client.release();
      res.status(201).json(body);
    } catch (err) {
      client.release(err);
      throw err;
    }
  });
} else {
  throw new Error(`unknown variant ${variant}`);
}

// a clean exit on SIGTERM (make bench stops the app so; --cpu-prof writes its profile)
process.on('SIGTERM', () => process.exit(0));
app.listen(Number(port), '127.0.0.1', () => console.log(`listening on ${port}`));
