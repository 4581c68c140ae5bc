// The framework-independent part: options, key checks, the claim (with its
// polling of a duplicate in flight), the outcome (idem_finish with COMMIT,
// or ROLLBACK / idem_fail), and the HTTP answers of the extension's SQLSTATEs.
// The statements themselves are in statements.js; the requests of this
// process in flight in flights.js.
import { awaitFlight, flightOf, land, takeOff } from './flights.js';
import { decodeStored, encodeStored, problem } from './response.js';
import {
  claimSql, fingerprintOf, finishSql, forgetPrepared, literal, markPrepared,
} from './statements.js';

const DEFAULTS = {
  scope: '',
  required: true,
  methods: ['POST', 'PATCH'],
  storedHeaders: ['content-type', 'location'],
  storeClientErrors: true,
  ttl: null,
  lease: null,
  heartbeat: null,
  waitFor: 0,
  pollFrom: 25,
  retries: 3,
  maxKeyLength: 255,
  prepare: false,
};

// sf-string characters of the IETF draft: printable ASCII
const KEY_CHARACTERS = /^[\x20-\x7e]+$/;
const RETRYABLE = new Set(['40001', '40P01']);

export function resolveOptions(options) {
  const o = { ...DEFAULTS, ...options };
  if (!o.pool || typeof o.pool.connect !== 'function') {
    throw new TypeError('idempotency: the "pool" option must be a pg.Pool');
  }
  const scope = o.scope;
  o.scopeOf = typeof scope === 'function' ? scope : () => scope;
  o.methods = o.methods.map((m) => m.toUpperCase());
  o.storedHeaders = o.storedHeaders.map((h) => h.toLowerCase());
  if (o.lease != null && o.heartbeat == null) o.heartbeat = Math.floor(o.lease / 3);
  return o;
}

// Merges per-route settings into resolved ones (the pool and defaults stay).
export function routeOptions(resolved, overrides) {
  if (!overrides || overrides === true) return resolved;
  return resolveOptions({ ...resolved, ...overrides, scope: overrides.scope ?? resolved.scopeOf });
}

// -> a problem answer for a missing or malformed key, or null
function checkKey(key, o) {
  if (key === undefined || key === null) {
    return o.required
      ? problem(400, 'key-missing', 'Idempotency-Key header missing',
        'This operation requires an Idempotency-Key header.')
      : null;
  }
  if (key.length === 0 || key.length > o.maxKeyLength || !KEY_CHARACTERS.test(key)) {
    return problem(400, 'key-invalid', 'Invalid Idempotency-Key',
      `An Idempotency-Key is 1 to ${o.maxKeyLength} printable ASCII characters.`);
  }
  return null;
}

const interval = (ms) => `make_interval(secs => ${Number(ms) / 1000})`;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function releaseClient(client, err) {
  if (client.query !== Object.getPrototypeOf(client).query) delete client.query;
  // a connection that failed is not given back to the pool
  client.release(err && !err.code ? err : undefined);
}

async function rollback(client) {
  try {
    await client.query('ROLLBACK');
    releaseClient(client);
  } catch (err) {
    releaseClient(client, err);
  }
}

// The HTTP answer of an error the extension raised, or null (a bug or an
// outage: the framework's error handling answers it).
export function answerOf(err) {
  switch (err && err.code) {
    case 'IK001':
      return problem(422, 'key-reused', 'Idempotency-Key reused',
        'This Idempotency-Key was used with another request (method, path or body).');
    case 'IK002': case 'IK003':
      return problem(409, 'claim-lost', 'Idempotency-Key taken over',
        'The claim of this request ended before its outcome was recorded; nothing was committed.',
        { 'retry-after': '1' });
    case '42501':
      return problem(403, 'scope-forbidden', 'Idempotency scope not granted',
        'The database role may not use this idempotency scope.');
    case '25006':
      return problem(503, 'read-only', 'Database read-only',
        'The database is read-only (a standby or a read-only transaction); retry later.',
        { 'retry-after': '1' });
    case '40001': case '40P01':
      return problem(503, 'retry', 'Transaction conflict',
        'The transaction was rolled back by a serialization failure or deadlock; retry the request.',
        { 'retry-after': '1' });
    case '22023': case '22004': case '22008':
      return problem(400, 'key-invalid', 'Invalid Idempotency-Key', err.message);
    default:
      return null;
  }
}

function inProgress(retryAfterSeconds) {
  return problem(409, 'in-progress', 'Request in progress',
    'A request with this Idempotency-Key is still being processed; retry after the delay given.',
    { 'retry-after': String(Math.max(1, Math.ceil(retryAfterSeconds))) });
}

// The prepared statements, once per connection, on their own: a claim
// that fails must not leave the connection unsure whether it has them.
async function prepare(client, setup) {
  try {
    await client.query(setup);
  } catch (err) {
    if (err.code !== '42P05') throw err; // already there
  }
  markPrepared(client);
}

// claim(o, request) with request = {key, scope, method, path, body}:
// -> {answer} (replay, 409, or a problem), or {state} for a claimed key, in
// which case an in-transaction claim's client is held in its transaction.
// A duplicate in flight is polled without holding a connection; one of a
// request this process is claiming or running waits for it in memory.
export async function claim(o, request) {
  const deadline = Date.now() + o.waitFor;
  const fingerprint = fingerprintOf(request.method, request.path, request.body);
  let flight = null;
  if (o.lease == null) {
    const local = flightOf(o.pool, request, fingerprint);
    if (local && (local.claimed || o.waitFor > 0)) {
      if (o.waitFor <= 0) return { answer: inProgress(1) };
      const stored = await awaitFlight(local, deadline - Date.now());
      if (stored === undefined) return { answer: inProgress(1) };
      if (stored) return { answer: decodeStored(stored) };
      // nothing committed there: this request claims at the server
    }
    flight = takeOff(o.pool, request, fingerprint);
  }
  try {
    const claimed = await claimAtServer(o, request, fingerprint, deadline, flight);
    if (flight && !claimed.state) land(flight, claimed.stored ?? null);
    return claimed;
  } catch (err) {
    if (flight) land(flight, null);
    throw err;
  }
}

async function claimAtServer(o, request, fingerprint, deadline, flight) {
  let conflicts = 0;
  let polls = 0;
  let reprepared = false;
  const leased = o.lease != null;
  for (;;) {
    const client = await o.pool.connect();
    const { setup, sql } = claimSql(client, o, { ...request, fingerprint });
    let row;
    try {
      if (setup) await prepare(client, setup);
      const results = await client.query(`${leased ? '' : 'BEGIN; '}${sql}`);
      row = (Array.isArray(results) ? results[results.length - 1] : results).rows[0];
    } catch (err) {
      if (leased || !err.code) releaseClient(client, err); else await rollback(client);
      if (err.code === '26000' && !reprepared) {
        reprepared = true;
        forgetPrepared(client);
        continue;
      }
      if (RETRYABLE.has(err.code) && conflicts++ < o.retries) continue;
      const answer = answerOf(err);
      if (answer) return { answer };
      throw err;
    }
    if (row.outcome === 'claimed') {
      if (leased) releaseClient(client);
      return {
        state: {
          o, key: request.key, scope: request.scope, fence: Number(row.fence),
          recoveryPoint: row.recovery_point, client: leased ? null : client, lit: literal(client),
          lastError: null, unknown: false, done: false, timer: null, attempt: 0, request,
          flight: flight && Object.assign(flight, { claimed: true }),
        },
      };
    }
    if (leased) releaseClient(client); else await rollback(client);
    if (row.outcome === 'replay') return { answer: decodeStored(row.result), stored: row.result };
    // from pollFrom, doubling up to the server's retry_after, with jitter:
    // soon after a short request commits, seldom for a long one
    const wait = Math.min(row.retry_after * 1000, o.pollFrom * 2 ** polls++) * (0.5 + Math.random() / 2);
    if (Date.now() + wait > deadline) return { answer: inProgress(row.retry_after) };
    await sleep(wait);
  }
}

// Watches the handler's queries on the claim's client: a serialization
// failure or deadlock seen there turns its 500 into a 503 "retry".
function watch(state, client) {
  const query = client.query;
  client.query = function watchedQuery(...args) {
    const result = query.apply(this, args);
    if (result && typeof result.then === 'function') {
      result.then(null, (err) => { state.lastError = err; });
    }
    return result;
  };
}

// The object handlers see as req.idempotency / request.idempotency.
export function handlerApi(state) {
  const { o } = state;
  if (state.client) watch(state, state.client);
  if (o.lease != null && o.heartbeat > 0) {
    state.timer = setInterval(() => {
      extendLease(state, o.lease).catch(() => {});
    }, o.heartbeat);
    state.timer.unref();
  }
  return {
    key: state.key,
    scope: state.scope,
    fence: state.fence,
    recoveryPoint: state.recoveryPoint,
    get client() { return state.client; },
    begin: () => begin(state),
    extendLease: (ms) => extendLease(state, ms ?? o.lease),
    checkpoint: (point) => autocommit(state, `idem_checkpoint(${state.lit(state.key)}, ${state.lit(point)}`),
    markUnknown: async (detail) => {
      await autocommit(state, `idem_mark_unknown(${state.lit(state.key)}, ${state.lit(JSON.stringify(detail ?? {}))}::jsonb`);
      state.unknown = true;
    },
  };
}

// A client in a transaction: the claim's, or (leased mode, or a request
// without a key where the key is optional) one taken on first use.
async function begin(state) {
  if (state.client) return state.client;
  const client = await state.o.pool.connect();
  try {
    await client.query('BEGIN');
  } catch (err) {
    releaseClient(client, err);
    throw err;
  }
  state.client = client;
  watch(state, client);
  return client;
}

// A call that writes to the record on a connection of its own, committed
// at once (leased claims: a takeover must see it).
async function autocommit(state, call, extra = '') {
  if (state.o.lease == null) throw new Error('idempotency: checkpoints, heartbeats and unknown outcomes are for leased routes (the "lease" option)');
  const client = await state.o.pool.connect();
  try {
    const r = await client.query(`SELECT ${call}${extra}, scope => ${state.lit(state.scope)}, fence => ${state.fence})`);
    releaseClient(client);
    return r.rows[0];
  } catch (err) {
    releaseClient(client, err);
    throw err;
  }
}

async function extendLease(state, ms) {
  const row = await autocommit(state, `idem_extend_lease(${state.lit(state.key)}, ${interval(ms)}`);
  return row && Object.values(row)[0];
}

// After a serialization failure or deadlock in the handler or at commit
// (everything rolled back): RETRY while the route has retries left (the
// framework runs the request again), else 503 with Retry-After.
export const RETRY = Object.freeze({ retry: true });
export const isRetryable = (err) => Boolean(err) && RETRYABLE.has(err.code);
function retryOr(state, err) {
  return state.attempt < state.o.retries ? RETRY : answerOf(err);
}

// complete(state, response): records the outcome of the handler's response
// {status, headers, body} and returns what to send: the response itself,
// or a problem when its outcome could not be recorded, or RETRY.
export async function complete(state, response) {
  if (state.done) return response;
  state.done = true;
  let stored = null;
  try {
    return await completeOnce(state, response, (committed) => { stored = committed; });
  } finally {
    // local duplicates waiting for this request: its stored response, or
    // null (nothing committed: they claim at the server)
    if (state.flight) land(state.flight, stored);
  }
}

async function completeOnce(state, response, committed) {
  if (state.timer) clearInterval(state.timer);
  const { o } = state;
  const leased = o.lease != null;
  const client = state.client;
  state.client = null;
  const keep = response.status < 400 || (response.status < 500 && o.storeClientErrors);
  const conflict = () => (RETRYABLE.has(state.lastError && state.lastError.code) && response.status >= 500
    ? retryOr(state, state.lastError) : response);
  if (!state.key) {
    if (client && response.status < 500) return commitPlain(client, response);
    if (client) await rollback(client);
    return conflict();
  }
  if (state.unknown || !keep) {
    if (client) await rollback(client);
    if (leased && !state.unknown) await release(state, response.status);
    return conflict();
  }
  const target = client || await o.pool.connect();
  try {
    const stored = encodeStored(response, o.storedHeaders);
    const finish = finishSql(target, state.key, state.scope, stored, leased ? state.fence : null);
    await target.query(client ? `${finish}; COMMIT` : finish);
    committed(stored);
    releaseClient(target);
    return response;
  } catch (err) {
    if (client && err.code) await rollback(target); else releaseClient(target, err);
    if (leased && !['IK002', 'IK003'].includes(err.code)) await release(state, 500).catch(() => {});
    if (RETRYABLE.has(err.code)) return retryOr(state, err);
    const answer = answerOf(err);
    if (answer) return answer;
    throw err;
  }
}

// A request without a key on a route where it is optional: its own
// transaction commits with a success and rolls back with an error.
async function commitPlain(client, response) {
  try {
    await client.query('COMMIT');
    releaseClient(client);
    return response;
  } catch (err) {
    releaseClient(client, err);
    throw err;
  }
}

// Leased claim of a failed request: idem_fail, retryable, so that a retry
// takes the key over at once.
async function release(state, status) {
  const { lit } = state;
  const client = await state.o.pool.connect();
  try {
    await client.query(`SELECT idem_fail(${lit(state.key)}, ${lit(JSON.stringify({ status }))}::jsonb,`
      + ` retryable => true, scope => ${lit(state.scope)}, fence => ${state.fence})`);
    releaseClient(client);
  } catch (err) {
    releaseClient(client, err);
    if (!['IK002', 'IK003'].includes(err.code)) throw err;
  }
}

// abort(state): the response never completed (connection closed, error
// before a response): roll back, release the key of a leased claim.
export async function abort(state) {
  await complete(state, { status: 500, headers: {}, body: Buffer.alloc(0) }).catch(() => {});
}

// admit(o, key, request) with request = {raw (the framework's request, for
// the scope function), method, path, body}: -> {answer} to send (a bad key,
// a replay, 409, a problem) or {state} of a claimed key, or of a request
// without a key on a route where it is optional.
export async function admit(o, key, request) {
  const refused = checkKey(key, o);
  if (refused) return { answer: refused };
  if (key === undefined) return { state: unprotectedState(o) };
  return claim(o, {
    key, scope: String(await o.scopeOf(request.raw)), method: request.method, path: request.path, body: request.body,
  });
}

// A request without a key where the key is optional: no claim, and a
// transaction on first use of begin().
function unprotectedState(o) {
  return {
    o, key: null, scope: null, fence: null, recoveryPoint: null, client: null,
    lit: null, lastError: null, unknown: false, done: false, timer: null, attempt: 0, request: null,
  };
}
