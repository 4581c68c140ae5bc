// Express (4 and 5) middleware: idempotency(options) -> (req, res, next).
// The handler's response is held back (writeHead, write and end are
// captured) until its outcome is committed with the claim; only then are
// the bytes sent, so a client never sees an answer that was not recorded.
// The first complete answer (the first end()) is the one recorded and
// sent: whatever the handler or an error handler writes after it is
// ignored (a warning, once), so what a client receives is what a replay
// returns.
import {
  IGNORED, RETRY, admit, complete, handlerApi, resolveOptions,
} from './core.js';
import { answers } from './answers.js';
import { declaredOver, unreadBody } from './request-body.js';

const kAttempt = Symbol('idempotency attempt');
const kEntryHeaders = Symbol('idempotency headers at entry');
const kOriginal = Symbol('idempotency response methods');
const kSending = Symbol('idempotency sending');
const HELD = ['writeHead', 'write', 'end', 'setHeader', 'removeHeader', 'appendHeader'];

// the response's own methods (or another middleware's wrappers), whatever
// capture() put in their place
const original = (res) => res[kOriginal] ?? res;

// an answer given through the response's methods of the moment (held by
// capture() when a claim is open: its outcome is then recorded)
function respond(res, answer) {
  res.statusCode = answer.status;
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  for (const [name, value] of Object.entries(answer.headers)) res.setHeader(name, value);
  res.setHeader('content-length', answer.body.length);
  res.end(answer.body);
}

// the answer as it was when the handler completed it (an error handler
// may have changed the status since; its header calls were ignored, so
// the headers of the handler's own answer are still in place); the held
// methods let the response's own calls through meanwhile
function send(res, response, own = false) {
  const m = original(res);
  res[kSending] = true;
  try {
    if (!own) {
      for (const name of res.getHeaderNames()) m.removeHeader.call(res, name);
      for (const [name, value] of Object.entries(response.headers)) m.setHeader.call(res, name, value);
    }
    m.setHeader.call(res, 'content-length', response.body.length);
    res.statusCode = response.status;
    m.end.call(res, response.body);
  } finally {
    res[kSending] = false;
  }
}

// the response's methods as they were before capture(): what is written
// from now on goes out as written
function uncapture(res) {
  Object.assign(res, res[kOriginal]);
  delete res[kOriginal];
}

// Runs the request again through the app after a serialization failure or
// deadlock: nothing was sent, the response is reset to what it was when
// the middleware first saw it, and the body parsers skip the parsed body.
function redispatch(req, res, attempt) {
  uncapture(res);
  req[kAttempt] = attempt;
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  for (const [name, value] of Object.entries(req[kEntryHeaders])) res.setHeader(name, value);
  res.statusCode = 200;
  req.url = req.originalUrl;
  req.app.handle(req, res, (err) => respond(res, err
    ? answers.internal('The request failed when it was run again.')
    : answers.internal('No route answered the request when it was run again.')));
}

// Holds the response until finalize(response) says what to send; the
// first end() is the answer, anything after it is ignored. Bytes beyond
// limit are not kept (the response is then tooLarge).
function capture(res, { finalize, onError, retry, limit, warn }) {
  const saved = {};
  for (const name of HELD) saved[name] = res[name];
  res[kOriginal] = saved;
  const chunks = [];
  let size = 0;
  let ended = false;
  const add = (chunk, encoding) => {
    if (chunk === undefined || chunk === null || typeof chunk === 'function') return;
    const bytes = Buffer.isBuffer(chunk) ? chunk
      : chunk instanceof Uint8Array ? Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
        : Buffer.from(chunk, typeof encoding === 'string' ? encoding : 'utf8');
    size += bytes.length;
    if (size <= limit) chunks.push(bytes);
  };
  const late = (name) => function ignored(...args) {
    warn(name);
    const cb = args.find((a) => typeof a === 'function');
    if (cb && (name === 'write' || name === 'end')) process.nextTick(cb);
    return name === 'write' ? true : res;
  };
  res.writeHead = function heldWriteHead(status, reason, headers) {
    if (res[kSending]) return saved.writeHead.call(res, status, reason, headers);
    if (ended) return late('writeHead')(status, reason, headers);
    res.statusCode = status;
    const h = typeof reason === 'object' ? reason : headers;
    if (Array.isArray(h)) for (let i = 0; i < h.length; i += 2) saved.setHeader.call(res, h[i], h[i + 1]);
    else if (h) for (const [name, value] of Object.entries(h)) saved.setHeader.call(res, name, value);
    return res;
  };
  res.write = function heldWrite(chunk, encoding, callback) {
    if (res[kSending]) return saved.write.call(res, chunk, encoding, callback);
    if (ended) return late('write')(chunk, encoding, callback);
    add(chunk, encoding);
    const cb = typeof encoding === 'function' ? encoding : callback;
    if (cb) process.nextTick(cb);
    return true;
  };
  for (const name of ['setHeader', 'removeHeader', 'appendHeader']) {
    if (typeof saved[name] !== 'function') continue;
    res[name] = function heldHeader(...args) {
      return ended && !res[kSending] ? late(name)(...args) : saved[name].apply(res, args);
    };
  }
  res.end = function heldEnd(chunk, encoding, callback) {
    if (res[kSending]) return saved.end.call(res, chunk, encoding, callback);
    if (ended) return late('end')(chunk, encoding, callback);
    add(chunk, encoding);
    ended = true;
    const done = [chunk, encoding, callback].find((a) => typeof a === 'function');
    const response = {
      status: res.statusCode,
      headers: res.getHeaders(),
      body: size > limit ? Buffer.alloc(0) : chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size),
      tooLarge: size > limit,
    };
    chunks.length = 0;
    finalize(response).then((answer) => {
      if (answer === IGNORED) return;
      if (answer === RETRY) {
        retry();
      } else {
        send(res, answer, answer === response);
        if (done) res.once('finish', done);
      }
    }).catch((err) => {
      // an error the package has no answer for (its outcome could not be
      // recorded; nothing is committed), or one of sending the answer
      // (Node refuses a status outside 100-999): the app's error handler
      // answers it, through the response's own methods
      uncapture(res);
      onError(err);
    });
    return res;
  };
}

export function idempotency(options) {
  const o = resolveOptions(options);
  let warned = false;
  const warn = (what) => {
    if (warned) return;
    warned = true;
    process.emitWarning(`idempotency: res.${what}() after the response was complete (a second answer, or an error`
      + ' handler after it) is ignored: the first complete answer is the one recorded and sent', 'IdempotencyWarning');
  };

  async function run(req, res, next) {
    const attempt = req[kAttempt] ?? 0;
    if (attempt === 0) req[kEntryHeaders] = res.getHeaders();
    if (declaredOver(req.headers, o.maxBodyBytes)) return respond(res, answers.bodyTooLarge(o.maxBodyBytes));
    if (unreadBody(req)) {
      const err = new Error('idempotency: the request has a body that no body parser read before the middleware, so'
        + ' its fingerprint would not cover it: parse every content type the route accepts before the middleware'
        + ' (express.json(), express.raw({ type: "*/*" }), ...)');
      err.status = 500;
      throw err;
    }
    const admitted = await admit(o, req.get('idempotency-key'), {
      raw: req, method: req.method, path: req.originalUrl, body: req.body,
    });
    if (admitted.answer) return respond(res, admitted.answer);
    const { state } = admitted;
    state.attempt = attempt;
    req.idempotency = handlerApi(state);
    capture(res, {
      finalize: (response) => complete(state, response),
      onError: next,
      retry: () => redispatch(req, res, attempt + 1),
      limit: o.maxResponseBytes,
      warn,
    });
    // an abandoned request (its session ended, its time ran out) is
    // answered at once; what the handler does later is ignored
    state.send = (answer) => {
      res.end(); // the handler's answer from now on: ignored
      send(res, answer);
    };
    return next();
  }

  return function idempotencyMiddleware(req, res, next) {
    if (!o.methods.includes(req.method)) return next();
    return run(req, res, next).catch(next);
  };
}

export { idempotency as expressIdempotency };
