// The application the tests drive, the same routes on Express 5, Express 4,
// Fastify, NestJS (nestjs on its Express platform, nestjs-fastify on its
// Fastify one) and Hono (@hono/node-server): POST /orders places one order
// row in the claim's transaction. A request whose body has "gate": true waits, after its
// insert, for the advisory lock the test holds (an in-flight request the
// test controls, with no timing involved).
import express5 from 'express';
import express4 from 'express4';
import Fastify from 'fastify';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { expressIdempotency, fastifyIdempotency } from '../src/index.js';
import { honoIdempotency } from '../src/hono.js';
import { buildNest } from './nest-app.js';

export const GATE = 7401;
// the gate of server.js between a handler's end and the outcome's COMMIT
export const COMMIT_GATE = 7402;

async function placeOrder(db, key, body, tenant) {
  const { rows } = await db.query(
    'INSERT INTO orders (idempotency_key, tenant, sku) VALUES ($1, $2, $3) RETURNING id',
    [key ?? null, tenant, body && body.sku != null ? String(body.sku) : null],
  );
  // after the write: a request held here has an uncommitted effect
  if (body && body.gate) await db.query(`SELECT pg_advisory_xact_lock_shared(${GATE})`);
  return rows[0].id;
}

// a real 40001 raised by the server, for the retry paths
const SERIALIZATION_FAILURE = "DO $$ BEGIN RAISE EXCEPTION 'test conflict' USING ERRCODE = '40001'; END $$";

const thrownOnce = new Set();
const conflictedOnce = new Set();
const conflictedAtCommitOnce = new Set();

// the tests' stand-in for the principal an authentication layer would
// establish (an application takes it from its verified session or token,
// never from a header the caller chooses)
const tenantOf = (req) => req.headers['x-tenant'] ?? 'default';

// Requests held by the test (route /orders/hold): key -> {pid (the claim's
// backend), release()}; a request waits here after its insert, on no
// connection activity, until the test releases it.
export const held = new Map();

// values for the DO block of /orders/raise (set_config: no SQL text built)
const RAISE = "DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = current_setting('test.code'),"
  + " MESSAGE = current_setting('test.message'); END $$";

// Route handlers written once over a small request/response shape.
const handlers = {
  async order(idem, body, tenant, reply) {
    const db = await idem.begin();
    const id = await placeOrder(db, idem.key, body, tenant);
    reply(201, { 'content-type': 'application/json', location: `/orders/${id}` },
      JSON.stringify({ order_id: id, sku: body.sku ?? null, note: 'ü' }));
  },
  // fails after its insert the first time a key is seen (a transient fault)
  async throwAfterInsert(idem, body, tenant, reply) {
    const id = await placeOrder(await idem.begin(), idem.key, body, tenant);
    if (!thrownOnce.has(idem.key)) {
      thrownOnce.add(idem.key);
      throw new Error('handler failed after its insert');
    }
    reply(201, { 'content-type': 'application/json' }, JSON.stringify({ order_id: id }));
  },
  async answer503(idem, body, tenant, reply) {
    await placeOrder(await idem.begin(), idem.key, body, tenant);
    reply(503, { 'content-type': 'application/json' }, '{"error":"downstream"}');
  },
  async answer404(idem, body, tenant, reply) {
    await placeOrder(await idem.begin(), idem.key, body, tenant);
    reply(404, { 'content-type': 'application/json' }, JSON.stringify({ missing: body.sku, n: Math.random() }));
  },
  // a serialization failure the first time a key is seen, or always: in
  // the handler, or at COMMIT (a deferred constraint trigger, see
  // helpers.js: setupDatabase), after the handler has answered
  async conflict(idem, body, tenant, reply, query, atCommit) {
    const db = await idem.begin();
    const id = await placeOrder(db, idem.key, body, tenant);
    const seen = atCommit ? conflictedAtCommitOnce : conflictedOnce;
    if (!seen.has(idem.key) || query.always) {
      seen.add(idem.key);
      await (atCommit ? db.query('INSERT INTO commit_conflict VALUES ($1)', [idem.key]) : db.query(SERIALIZATION_FAILURE));
    }
    reply(201, { 'content-type': 'application/json' }, JSON.stringify({ order_id: id }));
  },
  conflictAtCommit(idem, body, tenant, reply, query) {
    return handlers.conflict(idem, body, tenant, reply, query, true);
  },
  // waits, after its insert, until the test releases it (held)
  async hold(idem, body, tenant, reply) {
    const db = await idem.begin();
    const id = await placeOrder(db, idem.key, body, tenant);
    const { rows } = await db.query('SELECT pg_backend_pid() AS pid');
    await new Promise((resolve) => { held.set(idem.key, { pid: rows[0].pid, release: resolve }); });
    await placeOrder(db, idem.key, body, tenant);
    reply(201, { 'content-type': 'application/json' }, JSON.stringify({ order_id: id }));
  },
  // the SQLSTATE and message of the query string raised in the handler's
  // transaction after its insert; ?terminate: its session ended for real;
  // ?timeout: a real statement timeout
  async raise(idem, body, tenant, reply, query) {
    const db = await idem.begin();
    await placeOrder(db, idem.key, body, tenant);
    if (query.terminate) await db.query('SELECT pg_terminate_backend(pg_backend_pid())');
    else if (query.timeout) await db.query("SET LOCAL statement_timeout = 1; SELECT pg_sleep(10)");
    else {
      await db.query("SELECT set_config('test.code', $1, true), set_config('test.message', $2, true)",
        [query.code, query.message ?? 'raised by the test']);
      await db.query(RAISE);
    }
    reply(201, { 'content-type': 'application/json' }, '{}');
  },
  // transaction control on the request's client (?sql=...), its error
  // swallowed, then an insert and 201
  async endTransaction(idem, body, tenant, reply, query) {
    const db = await idem.begin();
    await db.query(query.sql).catch(() => {});
    await placeOrder(db, idem.key, body, tenant).catch(() => {});
    reply(201, { 'content-type': 'application/json' }, '{}');
  },
  // a response of ?bytes= bytes (text), with a cookie and other headers
  async big(idem, body, tenant, reply, query) {
    await placeOrder(await idem.begin(), idem.key, body, tenant);
    reply(201, {
      'content-type': 'text/plain; charset=utf-8', 'set-cookie': 'session=secret-of-the-first-caller',
      etag: '"v1"', 'x-internal': 'not stored',
    }, 'é'.repeat(Math.floor(Number(query.bytes ?? 2) / 2)));
  },
  // answers with ?status= (Express 4 sends any number to Node; the other
  // frameworks refuse one outside 100-999 in the handler)
  async status(idem, body, tenant, reply, query) {
    await placeOrder(await idem.begin(), idem.key, body, tenant);
    reply(Number(query.status), { 'content-type': 'application/json' }, '{}');
  },
  // leased: never answers (until the test releases it through held);
  // a retry that took the key over answers at once
  async hang(idem, body, tenant, reply) {
    if (idem.fence > 1) {
      reply(201, { 'content-type': 'application/json' }, JSON.stringify({ fence: idem.fence }));
      return;
    }
    await new Promise((resolve) => { held.set(idem.key, { release: resolve }); });
    reply(201, { 'content-type': 'application/json' }, '{"late":true}');
  },
  async binary(idem, body, tenant, reply) {
    await placeOrder(await idem.begin(), idem.key, {}, tenant);
    reply(200, { 'content-type': 'application/octet-stream' },
      Buffer.concat([Buffer.from([0, 255, 254, 1]), Buffer.from(body)]));
  },
  // leased: the fence, a checkpoint and a heartbeat before the "outside
  // call", then the order with the outcome; ?unknown marks the outcome unknown
  async leased(idem, body, tenant, reply, query) {
    await idem.checkpoint('before-call');
    await idem.extendLease(60000);
    if (query.unknown) {
      await idem.markUnknown({ reason: 'provider timed out' });
      reply(504, { 'content-type': 'application/json' }, '{"error":"unknown"}');
      return;
    }
    if (query.fail) throw new Error('the provider refused');
    const db = await idem.begin();
    const id = await placeOrder(db, idem.key, body, tenant);
    reply(201, { 'content-type': 'application/json' },
      JSON.stringify({ order_id: id, fence: idem.fence, recovery_point: idem.recoveryPoint }));
  },
};

export const ROUTES = [
  ['/orders', 'order', {}],
  ['/orders/optional', 'order', { required: false }],
  ['/orders/wait', 'order', { waitFor: 120000 }],
  ['/orders/throw', 'throwAfterInsert', {}],
  ['/orders/503', 'answer503', {}],
  ['/orders/404', 'answer404', {}],
  ['/orders/404-not-stored', 'answer404', { storeClientErrors: false }],
  ['/orders/conflict', 'conflict', {}],
  ['/orders/conflict-at-commit', 'conflictAtCommit', {}],
  ['/orders/leased', 'leased', { lease: 30000 }],
  ['/orders/hold', 'hold', {}],
  ['/orders/raise', 'raise', {}],
  ['/orders/end-transaction', 'endTransaction', {}],
  ['/orders/big', 'big', {}],
  ['/orders/too-big', 'big', { maxResponseBytes: 1000 }],
  ['/orders/status', 'status', {}],
  ['/orders/hang', 'hang', { lease: 60000, handlerTimeout: 300 }],
];

export function buildExpress(version, options) {
  const app = (version === 4 ? express4 : express5)();
  app.use(express5.json());
  app.use(express5.raw({ type: 'application/octet-stream' }));
  for (const [path, name, routeOptions] of [...ROUTES, ['/binary', 'binary', {}]]) {
    const middleware = expressIdempotency({ scope: tenantOf, ...options, ...routeOptions });
    app.post(path, middleware, (req, res, next) => {
      const reply = (status, headers, body) => res.status(status).set(headers).send(body);
      // Express 4 does not catch rejected promises: pass them on
      handlers[name](req.idempotency, req.body, tenantOf(req), reply, req.query).catch(next);
    });
  }
  // answers twice: res.end() after res.json(), or (?next) next(err) after it
  app.post('/orders/twice', expressIdempotency({ scope: tenantOf, ...options }), (req, res, next) => {
    placeOrder(req.idempotency.client, req.idempotency.key, req.body, tenantOf(req)).then((id) => {
      res.status(201).json({ order_id: id });
      if (req.query.next) next(new Error('an error after the answer'));
      else res.end('a second answer');
    }).catch(next);
  });
  return app;
}

export function buildFastify(options) {
  const app = Fastify();
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (req, body, done) => done(null, body));
  app.register(fastifyIdempotency, { scope: tenantOf, ...options });
  app.register(async (scoped) => {
    for (const [path, name, routeOptions] of [...ROUTES, ['/binary', 'binary', {}]]) {
      scoped.post(path, { config: { idempotency: routeOptions } }, async (request, reply) => {
        let sent;
        await handlers[name](request.idempotency, request.body, tenantOf(request), (status, headers, body) => {
          sent = reply.code(status).headers(headers).send(body);
        }, request.query);
        return sent;
      });
    }
    // reply.send twice; on a route the plugin handles and on one it does not
    for (const [path, idempotency] of [['/orders/twice', {}], ['/plain/twice', false]]) {
      scoped.post(path, { config: { idempotency } }, async (request, reply) => {
        const id = idempotency ? await placeOrder(request.idempotency.client, request.idempotency.key, request.body,
          tenantOf(request)) : 0;
        reply.code(201).send({ order_id: id });
        reply.send({ second: true });
        return reply;
      });
    }
    scoped.post('/orders/hijack', async (request, reply) => {
      await placeOrder(request.idempotency.client, request.idempotency.key, request.body, tenantOf(request));
      reply.hijack();
      reply.raw.writeHead(201, { 'content-type': 'application/json' });
      reply.raw.end('{"hijacked":true}');
    });
  });
  return app;
}

export function buildHono(options) {
  const app = new Hono();
  const tenant = (c) => c.req.header('x-tenant') ?? 'default';
  // Hono's default error handler logs the error: the tests throw on purpose
  app.onError((err, c) => c.text('Internal Server Error', 500));
  for (const [path, name, routeOptions] of [...ROUTES, ['/binary', 'binary', {}]]) {
    app.post(path, honoIdempotency({ scope: tenant, ...options, ...routeOptions }), async (c) => {
      const body = c.req.header('content-type') === 'application/octet-stream'
        ? Buffer.from(await c.req.arrayBuffer()) : await c.req.json();
      let response;
      await handlers[name](c.get('idempotency'), body, tenant(c), (status, headers, data) => {
        response = c.body(data, status, headers);
      }, c.req.query());
      return response;
    });
  }
  return app;
}

// -> the base URL of the app listening on a free loopback port, and close()
export async function listen(framework, options) {
  if (framework === 'fastify') {
    const app = buildFastify(options);
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    return { url, close: () => app.close() };
  }
  if (framework === 'nestjs' || framework === 'nestjs-fastify') {
    const app = await buildNest(options, {
      handlers, routes: [...ROUTES, ['/binary', 'binary', {}]], tenantOf, placeOrder,
      platform: framework === 'nestjs' ? 'express' : 'fastify',
    });
    await app.listen(0, '127.0.0.1');
    const server = app.getHttpServer();
    return {
      url: `http://127.0.0.1:${server.address().port}`,
      close: () => { server.closeAllConnections(); return app.close(); },
    };
  }
  if (framework === 'hono') {
    const app = buildHono(options);
    const server = await new Promise((resolve) => {
      const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
    });
    return {
      url: `http://127.0.0.1:${server.address().port}`,
      close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }),
    };
  }
  return listenExpress(buildExpress(framework === 'express4' ? 4 : 5, options));
}

// -> the base URL of an Express app listening on a free loopback port, and close()
export async function listenExpress(app) {
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }),
  };
}
