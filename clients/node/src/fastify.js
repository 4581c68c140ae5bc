// Fastify plugin: the claim in preHandler (after the body is parsed), the
// outcome in onSend with the serialized payload, before a byte is sent.
// Routes opt out or change settings with config: { idempotency: ... }.
import fp from 'fastify-plugin';
import {
  RETRY, abort, admit, answerOf, claim, complete, handlerApi, isRetryable, resolveOptions, routeOptions,
} from './core.js';

const kState = Symbol('idempotency state');

async function payloadBytes(payload) {
  if (payload === null || payload === undefined) return Buffer.alloc(0);
  if (Buffer.isBuffer(payload)) return payload;
  if (typeof payload === 'string') return Buffer.from(payload);
  const chunks = [];
  for await (const chunk of payload) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
  return Buffer.concat(chunks);
}

function sendAnswer(reply, answer) {
  reply.code(answer.status).headers(answer.headers).send(answer.body);
  return reply;
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

  fastify.decorateRequest('idempotency', null);

  // A serialization failure or deadlock thrown by a handler: everything is
  // rolled back, the key claimed again and the handler run again, up to
  // `retries` times (one at commit, after the handler, is answered 503).
  fastify.addHook('onRoute', (route) => {
    const handler = route.handler;
    route.handler = async function idempotentHandler(request, reply) {
      for (;;) {
        try {
          return await handler.call(this, request, reply);
        } catch (err) {
          const state = request[kState];
          if (!state || !state.key || !isRetryable(err) || state.attempt >= state.o.retries || reply.sent) throw err;
          await abort(state);
          const claimed = await claim(state.o, state.request);
          if (claimed.answer) return sendAnswer(reply, claimed.answer);
          claimed.state.attempt = state.attempt + 1;
          request[kState] = claimed.state;
          request.idempotency = handlerApi(claimed.state);
        }
      }
    };
  });

  fastify.addHook('preHandler', async (request, reply) => {
    const o = optionsOf(request);
    if (!o) return undefined;
    const admitted = await admit(o, request.headers['idempotency-key'], {
      raw: request, method: request.method, path: request.url, body: request.body,
    });
    if (admitted.answer) return sendAnswer(reply, admitted.answer);
    const { state } = admitted;
    request[kState] = state;
    request.idempotency = handlerApi(state);
    return undefined;
  });

  fastify.addHook('onSend', async (request, reply, payload) => {
    const state = request[kState];
    if (!state || state.done) return payload;
    const body = await payloadBytes(payload);
    const response = { status: reply.statusCode, headers: reply.getHeaders(), body };
    let answer = await complete(state, response);
    if (answer === RETRY) answer = answerOf(state.lastError ?? { code: '40001' });
    if (answer === response) return body;
    for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
    reply.code(answer.status).headers(answer.headers);
    return answer.body;
  });

  // a request that ended without onSend (an error while sending): nothing
  // is recorded, the connection goes back to the pool
  const cleanup = async (request) => {
    const state = request[kState];
    if (state && !state.done) await abort(state);
  };
  fastify.addHook('onResponse', cleanup);
}

export const idempotency = fp(idempotencyPlugin, { name: 'pg-idempotency-key', fastify: '4.x || 5.x' });
