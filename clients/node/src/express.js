// Express (4 and 5) middleware: idempotency(options) -> (req, res, next).
// The handler's response is held back (writeHead, write and end are
// captured) until its outcome is committed with the claim; only then are
// the bytes sent, so a client never sees an answer that was not recorded.
import {
  RETRY, admit, complete, handlerApi, resolveOptions,
} from './core.js';
import { problem } from './response.js';

function send(res, response) {
  res.statusCode = response.status;
  if (response.replaced) {
    for (const name of res.getHeaderNames()) res.removeHeader(name);
  }
  for (const [name, value] of Object.entries(response.headers)) res.setHeader(name, value);
  res.setHeader('content-length', response.body.length);
  res.end(response.body);
}

const kAttempt = Symbol('idempotency attempt');
const kEntryHeaders = Symbol('idempotency headers at entry');

// Runs the request again through the app after a serialization failure or
// deadlock: nothing was sent, the response is reset to what it was when
// the middleware first saw it, and the body parsers skip the parsed body.
function redispatch(req, res, attempt) {
  req[kAttempt] = attempt;
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  for (const [name, value] of Object.entries(req[kEntryHeaders])) res.setHeader(name, value);
  res.statusCode = 200;
  req.url = req.originalUrl;
  req.app.handle(req, res, (err) => send(res, err
    ? problem(500, 'internal', 'Internal Server Error', 'The request failed when it was run again.')
    : problem(404, 'not-found', 'Not Found', 'No route answered the request when it was run again.')));
}

// Holds the response until finalize(response) says what to send.
function capture(res, finalize, onError, retry) {
  const { writeHead, write, end } = res;
  const chunks = [];
  const add = (chunk, encoding) => {
    if (chunk !== undefined && chunk !== null && typeof chunk !== 'function') {
      chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk, typeof encoding === 'string' ? encoding : 'utf8'));
    }
  };
  res.writeHead = function heldWriteHead(status, reason, headers) {
    res.statusCode = status;
    const h = typeof reason === 'object' ? reason : headers;
    if (Array.isArray(h)) for (let i = 0; i < h.length; i += 2) res.setHeader(h[i], h[i + 1]);
    else if (h) for (const [name, value] of Object.entries(h)) res.setHeader(name, value);
    return res;
  };
  res.write = function heldWrite(chunk, encoding, callback) {
    add(chunk, encoding);
    const cb = typeof encoding === 'function' ? encoding : callback;
    if (cb) process.nextTick(cb);
    return true;
  };
  res.end = function heldEnd(chunk, encoding, callback) {
    add(chunk, encoding);
    const done = [chunk, encoding, callback].find((a) => typeof a === 'function');
    Object.assign(res, { writeHead, write, end });
    const response = {
      status: res.statusCode,
      headers: res.getHeaders(),
      body: Buffer.concat(chunks),
    };
    finalize(response).then((answer) => {
      if (answer === RETRY) {
        retry();
      } else if (answer === response) {
        res.setHeader('content-length', response.body.length);
        res.end(response.body, done);
      } else {
        send(res, answer);
      }
    }, onError);
    return res;
  };
}

export function idempotency(options) {
  const o = resolveOptions(options);

  async function run(req, res, next) {
    const attempt = req[kAttempt] ?? 0;
    if (attempt === 0) req[kEntryHeaders] = res.getHeaders();
    const admitted = await admit(o, req.get('idempotency-key'), {
      raw: req, method: req.method, path: req.originalUrl, body: req.body,
    });
    if (admitted.answer) return send(res, admitted.answer);
    const { state } = admitted;
    state.attempt = attempt;
    req.idempotency = handlerApi(state);
    capture(res, (response) => complete(state, response), next, () => redispatch(req, res, attempt + 1));
    return next();
  }

  return function idempotencyMiddleware(req, res, next) {
    if (!o.methods.includes(req.method)) return next();
    return run(req, res, next).catch(next);
  };
}
