// Hono middleware (Hono 4 on Node.js, @hono/node-server): honoIdempotency(
// options) -> a middleware. It reads the request's bytes (Hono keeps them
// for the handler's c.req.json()), claims the key, hands the handler
// c.get('idempotency'), then records the handler's Response (its bytes,
// status and headers) with the claim before returning it; the answers are
// the shared ones of answers.js.
import { createMiddleware } from 'hono/factory';
import {
  IGNORED, RETRY, abort, admit, answerOf, complete, handlerApi, resolveOptions,
} from './core.js';
import { answers } from './answers.js';
import { declaredOver } from './request-body.js';

// a JSON body is fingerprinted as JSON (key order and white space do not
// matter), as after express.json(); anything else as its bytes
const JSON_TYPE = /^application\/([\w.-]+\+)?json\b/i;

function bodyOf(bytes, type) {
  if (bytes.length === 0) return undefined;
  if (JSON_TYPE.test(type ?? '')) {
    try {
      const parsed = JSON.parse(bytes.toString('utf8'));
      if (parsed !== null && typeof parsed === 'object') return parsed;
    } catch {
      // not JSON after all: its bytes
    }
  }
  return bytes;
}

// -> the Response's bytes, or null past limit (the rest is not read)
async function bytesOf(response, limit) {
  if (!response.body) return Buffer.alloc(0);
  const chunks = [];
  let size = 0;
  const reader = response.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > limit) {
      await reader.cancel().catch(() => {});
      return null;
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks, size);
}

// 204, 205 and 304 carry no body (the Response constructor refuses one)
const NO_BODY = new Set([204, 205, 304]);
const responseOf = (status, headers, body) => new Response(
  NO_BODY.has(status) || body.length === 0 ? null : body,
  { status, headers },
);

const answerResponse = (answer) => responseOf(answer.status, answer.headers, answer.body);

// c.res replaced, not merged: Hono's setter would copy the handler's
// headers (a Location) onto a problem answer
function replace(c, response) {
  c.res = undefined;
  c.res = response;
}

export function idempotency(options) {
  const o = resolveOptions(options);
  return createMiddleware(async (c, next) => {
    if (!o.methods.includes(c.req.method)) return next();
    if (declaredOver(Object.fromEntries(c.req.raw.headers), o.maxBodyBytes)) {
      return answerResponse(answers.bodyTooLarge(o.maxBodyBytes));
    }
    // the handler's own c.req.json()/text() read the same bytes again
    const bytes = Buffer.from(await c.req.arrayBuffer());
    if (bytes.length > o.maxBodyBytes) return answerResponse(answers.bodyTooLarge(o.maxBodyBytes));
    const url = new URL(c.req.url);
    const admitted = await admit(o, c.req.header('idempotency-key'), {
      raw: c, method: c.req.method, path: url.pathname + url.search, body: bodyOf(bytes, c.req.header('content-type')),
    });
    if (admitted.answer) return answerResponse(admitted.answer);
    const { state } = admitted;
    c.set('idempotency', handlerApi(state));
    // an abandoned request (its session ended, its time ran out) is
    // answered at once; the handler's later Response is ignored
    const abandoned = new Promise((resolve) => { state.send = resolve; });
    const ran = next();
    let answer = await Promise.race([ran.then(() => null, (err) => ({ err })), abandoned]);
    if (answer && answer.err) {
      await abort(state);
      throw answer.err;
    }
    if (!answer) {
      const handled = c.res;
      let body;
      try {
        body = await bytesOf(handled, o.maxResponseBytes);
      } catch (err) {
        await abort(state); // the handler's stream failed: nothing kept
        throw err;
      }
      const headers = {};
      handled.headers.forEach((value, name) => { headers[name] = value; });
      const response = {
        status: handled.status, headers, body: body ?? Buffer.alloc(0), tooLarge: body === null,
      };
      answer = await complete(state, response);
      // a Hono middleware cannot run the rest of the chain again: a
      // serialization failure or deadlock answers 503 retry at once
      if (answer === RETRY) answer = answerOf({ code: '40001' });
      if (answer === IGNORED) answer = state.abandoned;
      if (answer === response) {
        replace(c, responseOf(handled.status, handled.headers, response.body));
        return undefined;
      }
    } else {
      ran.catch(() => {});
    }
    replace(c, answerResponse(answer));
    return undefined;
  });
}

export { idempotency as honoIdempotency };
