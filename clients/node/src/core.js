// The framework-independent part: key checks, the claim (with its polling
// of a duplicate in flight), the outcome (idem_finish_response with COMMIT,
// or ROLLBACK / idem_fail), and requests abandoned before their outcome (the
// session ended, the handler ran out of time). The statements are in
// statements.js and travel through pipeline.js; the connections are held
// through session.js; the answers are in answers.js; the requests of this
// process in flight in flights.js.
import {
  RETRYABLE, answerOf, answers, isUnavailable, outcomeAnswer, ownCallAnswer,
} from './answers.js';
import { awaitFlight, flightOf, land, takeOff } from './flights.js';
import { forgetStatements, pipeline } from './pipeline.js';
import {
  bodyOf, bodyOfParts, decodeStored, replayOf,
} from './response.js';
import {
  checkout, guarded, onBroken, release,
} from './session.js';
import {
  beginStep, bodyPartsStep, claimStep, commitStep, fingerprintOf, finishStep, inParts,
} from './statements.js';

export { answerOf } from './answers.js';
export { resolveOptions, routeOptions } from './options.js';

// sf-string characters of the IETF draft: printable ASCII; a comma is
// refused too: two header lines arrive joined by one ("a, b")
const KEY_CHARACTERS = /^[\x20-\x2b\x2d-\x7e]+$/;

// -> a problem answer for a missing or malformed key, or null
function checkKey(key, o) {
  if (key === undefined || key === null) return o.required ? answers.keyMissing() : null;
  if (key.length === 0 || key.length > o.maxKeyLength || !KEY_CHARACTERS.test(key)) {
    return answers.keyInvalid(`An Idempotency-Key is 1 to ${o.maxKeyLength} printable ASCII characters`
      + ' other than a comma, sent on one header line.');
  }
  return null;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const hasSqlstate = (err) => Boolean(err) && err.severity !== undefined;

async function rollback(client) {
  try {
    await client.query('ROLLBACK');
    release(client);
  } catch (err) {
    release(client, err);
  }
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
      if (o.waitFor <= 0) return { answer: answers.inProgress(1) };
      const replay = await awaitFlight(local, deadline - Date.now());
      if (replay === undefined) return { answer: answers.inProgress(1) };
      if (replay) return { answer: replay };
      // nothing committed there: this request claims at the server
    }
    flight = takeOff(o.pool, request, fingerprint);
  }
  try {
    const claimed = await claimAtServer(o, request, fingerprint, deadline, flight);
    if (flight && !claimed.state) land(flight, claimed.replay ?? null);
    return claimed;
  } catch (err) {
    if (flight) land(flight, null);
    throw err;
  }
}

async function claimAtServer(o, request, fingerprint, deadline, flight) {
  let conflicts = 0;
  let polls = 0;
  let reparsed = false;
  const leased = o.lease != null;
  const step = claimStep(o, request.key, request.scope, fingerprint);
  for (;;) {
    let client;
    try {
      client = await checkout(o.pool);
    } catch (err) {
      return { answer: ownCallAnswer(err) ?? answers.unavailable() };
    }
    let row;
    let parts = null;
    try {
      const results = await pipeline(client, leased ? [step] : [beginStep(o), step]);
      row = results[results.length - 1][0];
      if (row.outcome === 'replay' && inParts(row)) {
        [parts] = await pipeline(client, [bodyPartsStep(request.key, request.scope)]);
      }
    } catch (err) {
      if (leased || !hasSqlstate(err) || isUnavailable(err)) release(client, err); else await rollback(client);
      if (err.code === '26000' && !reparsed) {
        reparsed = true;
        forgetStatements(client);
        continue;
      }
      if (RETRYABLE.has(err.code) && conflicts++ < o.retries) continue;
      const answer = ownCallAnswer(err);
      if (answer) return { answer };
      throw err;
    }
    if (row.outcome === 'claimed') {
      if (leased) release(client);
      return {
        state: {
          o, key: request.key, scope: request.scope, fence: Number(row.fence),
          recoveryPoint: row.recovery_point, client: leased ? null : client, handle: null,
          lastError: null, unknown: false, done: false, timer: null, deadline: null, attempt: 0, request,
          transactionEnded: false, abandoned: null, send: null,
          flight: flight && Object.assign(flight, { claimed: true }),
        },
      };
    }
    if (leased) release(client); else await rollback(client);
    if (row.outcome === 'replay') {
      const body = parts ? await bodyOfParts(parts) : bodyOf(row.body, row.body_base64);
      // the record went after the claim (expired, purged): claim again
      if (!body && conflicts++ < o.retries) continue;
      if (!body) return { answer: answers.unavailable() };
      const replay = decodeStored(JSON.parse(row.result), body);
      return { answer: replay, replay };
    }
    // from pollFrom, doubling up to the server's retry_after, with jitter:
    // soon after a short request commits, seldom for a long one
    const retryAfter = Number(row.retry_after);
    const wait = Math.min(retryAfter * 1000, o.pollFrom * 2 ** polls++) * (0.5 + Math.random() / 2);
    if (Date.now() + wait > deadline) return { answer: answers.inProgress(retryAfter) };
    await sleep(wait);
  }
}

// The client the request's writes go on, held for the handler: the
// session's end abandons the request (503 at once), the handler sees it
// through the guard of session.js.
function hold(state, client) {
  state.client = client;
  onBroken(client, () => abandon(state, answers.unavailable()));
  state.handle = guarded(client, state);
}

// The object handlers see as req.idempotency / request.idempotency.
export function handlerApi(state) {
  const { o } = state;
  if (state.client) hold(state, state.client);
  if (o.lease != null && state.key) {
    if (o.heartbeat > 0) {
      state.timer = setInterval(() => {
        extendLease(state, o.lease).catch(() => {});
      }, o.heartbeat);
      state.timer.unref();
    }
    // a handler that never answers: the heartbeat stops, the lease runs
    // out and a retry takes the key over
    if (o.handlerTimeout > 0) {
      state.deadline = setTimeout(() => abandon(state, answers.handlerTimeout(o.lease / 1000)), o.handlerTimeout);
      state.deadline.unref();
    }
  }
  return {
    key: state.key,
    scope: state.scope,
    fence: state.fence,
    recoveryPoint: state.recoveryPoint,
    get client() { return state.handle; },
    begin: () => begin(state),
    extendLease: (ms) => extendLease(state, ms ?? o.lease),
    checkpoint: (point) => autocommit(state, 'idem_checkpoint($1::text, $2::text', [point]),
    markUnknown: async (detail) => {
      await autocommit(state, 'idem_mark_unknown($1::text, $2::jsonb', [JSON.stringify(detail ?? {})]);
      state.unknown = true;
    },
  };
}

// A client in a transaction: the claim's, or (leased mode, or a request
// without a key where the key is optional) one taken on first use.
async function begin(state) {
  if (state.handle) return state.handle;
  if (state.done) throw new Error('idempotency: the request is over');
  const client = await checkout(state.o.pool);
  try {
    await client.query('BEGIN');
  } catch (err) {
    release(client, err);
    throw err;
  }
  if (state.done) {
    await rollback(client);
    throw new Error('idempotency: the request is over');
  }
  hold(state, client);
  return state.handle;
}

// A call that writes to the record on a connection of its own, committed
// at once (leased claims: a takeover must see it); call ends before its
// scope and fence arguments, args follow the key ($1).
async function autocommit(state, call, args = []) {
  if (state.o.lease == null) throw new Error('idempotency: checkpoints, heartbeats and unknown outcomes are for leased routes (the "lease" option)');
  const n = args.length + 2;
  const client = await checkout(state.o.pool);
  try {
    const r = await client.query(`SELECT ${call}, scope => $${n}::text, fence => $${n + 1}::bigint)`,
      [state.key, ...args, state.scope, state.fence]);
    release(client);
    return r.rows[0];
  } catch (err) {
    release(client, err);
    throw err;
  }
}

async function extendLease(state, ms) {
  const row = await autocommit(state, 'idem_extend_lease($1::text, make_interval(secs => $2::float8)', [Number(ms) / 1000]);
  return row && Object.values(row)[0];
}

function stopTimers(state) {
  if (state.timer) clearInterval(state.timer);
  if (state.deadline) clearTimeout(state.deadline);
}

// The request is given up before its outcome (its session ended, its
// handler ran out of time): nothing is committed, the answer is sent at
// once if nothing was (state.send, set by the framework), and whatever the
// handler does later is ignored.
export function abandon(state, answer) {
  if (state.done) return;
  state.done = true;
  state.abandoned = answer;
  stopTimers(state);
  const client = state.client;
  state.client = null;
  if (client) rollback(client); // a broken one is destroyed
  if (state.flight) land(state.flight, null);
  if (state.send) state.send(answer);
}

// After a serialization failure or deadlock in the handler or at commit
// (everything rolled back): RETRY while the route has retries left (the
// framework runs the request again), else 503 with Retry-After.
export const RETRY = Object.freeze({ retry: true });
// what complete() returns for a request already answered (abandoned)
export const IGNORED = Object.freeze({ ignored: true });
export const isRetryable = (err) => Boolean(err) && RETRYABLE.has(err.code);
function retryOr(state, err) {
  return state.attempt < state.o.retries ? RETRY : answerOf(err);
}

// complete(state, response): records the outcome of the handler's response
// {status, headers, body, tooLarge?} and returns what to send: the
// response itself, or a problem when its outcome could not be recorded,
// RETRY, or IGNORED when the request was answered already.
export async function complete(state, response) {
  if (state.done) return state.abandoned ? IGNORED : response;
  state.done = true;
  let committed = null;
  try {
    return await completeOnce(state, response, () => { committed = response; });
  } finally {
    // local duplicates waiting for this request: its committed response,
    // or null (nothing committed: they claim at the server); none waiting
    // (the usual case), no replay to build
    const { flight } = state;
    if (flight) land(flight, committed && flight.waiters > 0 ? replayOf(committed, state.o.storedHeaders) : null);
  }
}

async function completeOnce(state, response, committed) {
  stopTimers(state);
  const { o } = state;
  const leased = o.lease != null;
  const client = state.client;
  state.client = null;
  const keep = response.status < 400 || (response.status < 500 && o.storeClientErrors);
  const failed = () => {
    const err = state.lastError;
    if (response.status < 500 || !err) return response;
    if (RETRYABLE.has(err.code)) return retryOr(state, err);
    return isUnavailable(err) ? answers.unavailable() : response;
  };
  if (state.transactionEnded) {
    if (client) await rollback(client);
    if (leased && state.key) await releaseKey(state, 500).catch(() => {});
    return answers.transactionEnded();
  }
  if (response.tooLarge || (keep && state.key && response.body.length > o.maxResponseBytes)) {
    if (client) await rollback(client);
    if (leased && state.key) await releaseKey(state, 500).catch(() => {});
    return answers.responseTooLarge(o.maxResponseBytes);
  }
  if (!state.key) {
    if (client && response.status < 500) return commitPlain(client, response);
    if (client) await rollback(client);
    return failed();
  }
  if (state.unknown || !keep) {
    if (client) await rollback(client);
    if (leased && !state.unknown) await releaseKey(state, response.status);
    return failed();
  }
  let target = client;
  try {
    target = target || await checkout(o.pool);
    const finish = finishStep(o, state.key, state.scope, response, leased ? state.fence : null);
    await pipeline(target, client ? [finish, commitStep(o)] : [finish]);
    committed();
    release(target);
    return response;
  } catch (err) {
    if (target) {
      if (client && hasSqlstate(err) && !isUnavailable(err)) await rollback(target); else release(target, err);
    }
    if (leased && !['IK002', 'IK003'].includes(err.code)) await releaseKey(state, 500).catch(() => {});
    if (RETRYABLE.has(err.code)) return retryOr(state, err);
    const answer = outcomeAnswer(err);
    if (answer) return answer;
    throw err;
  }
}

// A request without a key on a route where it is optional: its own
// transaction commits with a success and rolls back with an error.
async function commitPlain(client, response) {
  try {
    await client.query('COMMIT');
    release(client);
    return response;
  } catch (err) {
    release(client, err);
    throw err;
  }
}

// Leased claim of a failed request: idem_fail, retryable, so that a retry
// takes the key over at once.
async function releaseKey(state, status) {
  const client = await checkout(state.o.pool);
  try {
    await client.query('SELECT idem_fail($1::text, $2::jsonb, retryable => true, scope => $3::text, fence => $4::bigint)',
      [state.key, JSON.stringify({ status }), state.scope, state.fence]);
    release(client);
  } catch (err) {
    release(client, err);
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
// no scope, a replay, 409, a problem) or {state} of a claimed key, or of a
// request without a key on a route where it is optional.
export async function admit(o, key, request) {
  const refused = checkKey(key, o);
  if (refused) return { answer: refused };
  if (key === undefined) return { state: unprotectedState(o) };
  const scope = await o.scopeOf(request.raw);
  if (!((typeof scope === 'string' && scope.length > 0) || typeof scope === 'number' || typeof scope === 'bigint')) {
    return { answer: answers.scopeMissing() };
  }
  return claim(o, {
    key, scope: String(scope), method: request.method, path: request.path, body: request.body,
  });
}

// A request without a key where the key is optional: no claim, and a
// transaction on first use of begin().
function unprotectedState(o) {
  return {
    o, key: null, scope: null, fence: null, recoveryPoint: null, client: null, handle: null,
    lastError: null, unknown: false, done: false, timer: null, deadline: null, attempt: 0, request: null,
    transactionEnded: false, abandoned: null, send: null,
  };
}
