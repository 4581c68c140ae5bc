// Fastify plugin: the claim in preHandler (after the body is parsed), the
// outcome in onSend with the serialized payload, before a byte is sent.
// Routes opt out or change settings with config: { idempotency: ... }.
// A serialization failure or deadlock rolls everything back and runs the
// route's handler again: in the handler (the error it throws), or at
// COMMIT in onSend (its answer is then produced again there).
// idempotencyHooks (every hook but the claim) and enterRequest (the claim)
// also serve NestJS's Fastify platform, where its interceptor claims.
import {
  RETRY, abort, admit, answerOf, claim, complete, handlerApi, isRetryable, resolveOptions, routeOptions,
} from './core.js';
import { answers } from './answers.js';
import { declaredOver } from './request-body.js';

const internalError = answers.internal('The request failed when it was run again.');

const kState = Symbol('idempotency state');
const kHandler = Symbol('idempotency route handler');
const kEntry = Symbol('idempotency response at entry');
const kInReply = Symbol('idempotency answer already in the reply');
const kAnswered = Symbol('idempotency answer in onSend');

// -> the payload's bytes, or null when a stream is over limit (its bytes
// beyond it are not kept)
async function payloadBytes(payload, limit = Infinity) {
  if (payload === null || payload === undefined) return Buffer.alloc(0);
  if (Buffer.isBuffer(payload)) return payload;
  if (typeof payload === 'string') return Buffer.from(payload);
  const chunks = [];
  let size = 0;
  for await (const chunk of payload) {
    size += chunk.length;
    if (size <= limit) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
  }
  return size <= limit ? Buffer.concat(chunks) : null;
}

function sendAnswer(reply, answer) {
  reply.code(answer.status).headers(answer.headers).send(answer.body);
  return reply;
}

// The bytes Fastify's send would make of a payload the handler gave, and
// the content-type it would set: a re-run in onSend cannot send again.
async function serialized(reply, payload) {
  const typed = (type) => { if (!reply.hasHeader('content-type')) reply.header('content-type', type); };
  if (payload === undefined || payload === null) return Buffer.alloc(0);
  if (Buffer.isBuffer(payload) || typeof payload.pipe === 'function') {
    typed('application/octet-stream');
    return payloadBytes(payload);
  }
  if (typeof payload === 'string') {
    typed('text/plain; charset=utf-8');
    return Buffer.from(payload);
  }
  typed('application/json; charset=utf-8');
  return Buffer.from(reply.serialize(payload));
}

// Claims the key again after a rollback: -> {answer} or {state}, the new
// state in place for the handler (request.idempotency).
async function reclaim(request, state) {
  const claimed = await claim(state.o, state.request);
  if (claimed.answer) return claimed;
  claimed.state.attempt = state.attempt + 1;
  request[kState] = claimed.state;
  request.idempotency = handlerApi(claimed.state);
  return claimed;
}

// The handler run again in onSend, after a 40001/40P01 at COMMIT: the
// reply reset to what it was before the handler, its send captured; ->
// {status, headers, body} of its answer, or an error it threw.
async function rerun(request, reply) {
  reply.code(request[kEntry].status);
  for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
  reply.headers(request[kEntry].headers);
  const { handler, context } = request[kHandler];
  // the handler's promise may resolve to the reply, a thenable that
  // resolves once the response is out: a send ends the wait instead
  let payload;
  let sent;
  const sending = new Promise((resolve) => { sent = resolve; });
  const { send } = reply;
  reply.send = function capturedSend(value) {
    payload = value;
    sent();
    return reply;
  };
  try {
    const ran = Promise.resolve(handler.call(context, request, reply));
    const returned = await Promise.race([ran.then((value) => ({ value })), sending]);
    if (returned) payload = returned.value;
    else ran.catch(() => {}); // sent; what the handler does next is its own
  } finally {
    reply.send = send; // the send it had
  }
  const body = await serialized(reply, payload);
  return { status: reply.statusCode, headers: reply.getHeaders(), body, [kInReply]: true };
}

let warned = false;
function warnOnce() {
  if (warned) return;
  warned = true;
  process.emitWarning('idempotency: reply.send() after the reply was sent (a second answer) is ignored: the first'
    + ' answer is the one recorded and sent', 'IdempotencyWarning');
}

// Claims the request's key with the route's options o (the plugin's
// preHandler, or the NestJS interceptor): -> true when the handler is to
// run, false when the request was answered (a replay, 409, a problem). Not
// the reply: it is a thenable, which an async function's caller would
// await until the answer is sent, and then get undefined.
export async function enterRequest(o, request, reply) {
  if (declaredOver(request.headers, o.maxBodyBytes)) {
    sendAnswer(reply, answers.bodyTooLarge(o.maxBodyBytes));
    return false;
  }
  const admitted = await admit(o, request.headers['idempotency-key'], {
    raw: request, method: request.method, path: request.url, body: request.body,
  });
  if (admitted.answer) {
    sendAnswer(reply, admitted.answer);
    return false;
  }
  const { state } = admitted;
  request[kState] = state;
  request[kEntry] = { status: reply.statusCode, headers: { ...reply.getHeaders() } };
  request.idempotency = handlerApi(state);
  // the first send is the answer: a later one is ignored (a warning,
  // once), also while the first waits in onSend for its outcome
  const send = reply.send;
  reply.send = function firstSend(payload) {
    if (request[kAnswered]) {
      warnOnce();
      return reply;
    }
    return send.call(reply, payload);
  };
  // an abandoned request (its session ended, its time ran out) is
  // answered at once; the handler's later send is ignored
  state.send = (answer) => { if (!request[kAnswered]) sendAnswer(reply, answer); };
  // a hijacked reply is written past onSend: its outcome could not be
  // recorded with the answer
  reply.hijack = refusedHijack;
  return true;
}

// -> whether the request's route was added after idempotencyHooks (its
// handler can be run again), and whether its key is claimed already (a
// re-run after a serialization failure at COMMIT claimed it again)
export const hookedRoute = (request) => Boolean(request[kHandler]);
export const claimedAlready = (request) => Boolean(request[kState]) && !request[kState].done;

/**
 * What every claimed request needs, whoever claimed it (the plugin's
 * preHandler, or the NestJS interceptor): the handler run again after a
 * serialization failure or deadlock, the outcome recorded in onSend with
 * the answer's bytes, the cleanup of a request that ended without one.
 * Routes added before it are not covered.
 */
export async function idempotencyHooks(fastify) {
  fastify.decorateRequest('idempotency', null);

  // A serialization failure or deadlock thrown by a handler: everything is
  // rolled back, the key claimed again and the handler run again, up to
  // `retries` times.
  fastify.addHook('onRoute', (route) => {
    const handler = route.handler;
    route.handler = async function idempotentHandler(request, reply) {
      request[kHandler] = { handler, context: this };
      for (;;) {
        try {
          return await handler.call(this, request, reply);
        } catch (err) {
          const state = request[kState];
          if (!state || !state.key || !isRetryable(err) || state.attempt >= state.o.retries || reply.sent) throw err;
          await abort(state);
          const claimed = await reclaim(request, state);
          if (claimed.answer) return sendAnswer(reply, claimed.answer);
        }
      }
    };
  });

  // The outcome with the answer's bytes; a 40001/40P01 at COMMIT claims
  // again and runs the handler again here, up to `retries` times.
  async function record(request, reply, response) {
    let answer = await complete(request[kState], response);
    while (answer === RETRY) {
      const claimed = await reclaim(request, request[kState]);
      if (claimed.answer) return claimed.answer;
      let again;
      try {
        again = await rerun(request, reply);
      } catch (err) {
        await abort(claimed.state);
        if (!isRetryable(err) || claimed.state.attempt >= claimed.state.o.retries) {
          return answerOf(err) ?? internalError;
        }
        answer = RETRY;
        continue;
      }
      answer = await complete(claimed.state, again);
      if (answer === again) return again;
    }
    return answer;
  }

  // A callback hook, not an async one: on a route without a claim the
  // payload goes on at once, so a second reply.send finds the reply sent
  // (Fastify's own "already sent"), as without the plugin.
  fastify.addHook('onSend', (request, reply, payload, done) => {
    const state = request[kState];
    request[kAnswered] = true;
    if (!state || state.done) return done(null, payload);
    outcome(request, reply, payload, state).then((body) => done(null, body), (err) => {
      // an error the package has no answer for (the outcome could not be
      // recorded; nothing is committed): the error handler's send is the
      // answer, not a second one
      request[kAnswered] = false;
      done(err);
    });
    return undefined;
  });

  async function outcome(request, reply, payload, state) {
    const body = await payloadBytes(payload, state.o.maxResponseBytes);
    const response = {
      status: reply.statusCode, headers: reply.getHeaders(), body: body ?? Buffer.alloc(0), tooLarge: body === null,
    };
    const answer = await record(request, reply, response);
    if (answer === response || answer[kInReply]) return answer.body;
    for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
    reply.code(answer.status).headers(answer.headers);
    return answer.body;
  }

  // a request that ended without onSend (an error while sending): nothing
  // is recorded, the connection goes back to the pool
  const cleanup = async (request) => {
    const state = request[kState];
    if (state && !state.done) await abort(state);
  };
  fastify.addHook('onResponse', cleanup);
}

async function idempotencyPlugin(fastify, options) {
  const defaults = resolveOptions(options);
  const perRoute = new WeakMap();
  const optionsOf = (request) => {
    const config = (request.routeOptions && request.routeOptions.config) || request.routeConfig || {};
    const setting = config.idempotency;
    if (setting === false) return null;
    if (setting === undefined && !defaults.methods.includes(request.method)) return null;
    if (typeof setting !== 'object' || setting === null) return defaults;
    if (!perRoute.has(setting)) perRoute.set(setting, routeOptions(defaults, setting));
    return perRoute.get(setting);
  };

  await idempotencyHooks(fastify);
  fastify.addHook('preHandler', async (request, reply) => {
    const o = optionsOf(request);
    // the reply returned once answered: Fastify runs no handler
    if (o && !(await enterRequest(o, request, reply))) return reply;
    return undefined;
  });
}

function refusedHijack() {
  throw new Error('idempotency: reply.hijack() is refused on an idempotent route: a hijacked reply bypasses onSend,'
    + ' so its answer could not be recorded with the handler\'s writes (turn the plugin off for the route:'
    + ' config: { idempotency: false })');
}

// What fastify-plugin does, without the dependency: the plugin's hooks
// and decorator apply to the instance it is registered on.
idempotencyPlugin[Symbol.for('skip-override')] = true;
idempotencyPlugin[Symbol.for('fastify.display-name')] = 'pg-idempotency-key';
idempotencyPlugin[Symbol.for('plugin-meta')] = { name: 'pg-idempotency-key', fastify: '4.x || 5.x' };
idempotencyHooks[Symbol.for('skip-override')] = true;
idempotencyHooks[Symbol.for('fastify.display-name')] = 'pg-idempotency-key hooks';

export const idempotency = idempotencyPlugin;
export { idempotency as fastifyIdempotency };
