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
const HELD = ['writeHead', 'write', 'end', 'setHeader', 'removeHeader', 'appendHeader'];

// A held response's hold: {saved (the methods its calls go through to:
// the response's own, or another middleware's wrappers), sending,
// released, ended, chunks, size, and capture()'s options}, kept in the
// held methods' closures.

// Express sets the prototype of every request and response, and V8 then
// gives each one a map (hidden class) of its own: every property added to
// it afterwards (the held methods, req.idempotency) copies that map, some
// 3 µs and 1.5 kB each, and every later read of the object misses the
// inline caches. In dictionary mode an added property costs a hash entry,
// and all such objects share one map. Deleting a property other than the
// last one added switches an object to it; the property is put back at
// once, as it was (one that cannot be deleted, or an object that could
// not take it back, is left alone).
function toDictionaryMode(obj, name) {
  const d = Object.getOwnPropertyDescriptor(obj, name);
  if (!d || !d.configurable || !Object.isExtensible(obj)) return;
  delete obj[name];
  Object.defineProperty(obj, name, d);
}

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
function send(res, hold, response, own = false) {
  const m = hold.saved;
  hold.sending = true;
  try {
    if (!own) {
      for (const name of res.getHeaderNames()) m.removeHeader.call(res, name);
      for (const [name, value] of Object.entries(response.headers)) m.setHeader.call(res, name, value);
    }
    m.setHeader.call(res, 'content-length', response.body.length);
    res.statusCode = response.status;
    m.end.call(res, response.body);
  } finally {
    hold.sending = false;
  }
}

// the response's methods as they were before capture(): what is written
// from now on goes out as written
function uncapture(res, hold) {
  if (hold.released) return;
  hold.released = true;
  Object.assign(res, hold.saved);
}

// Runs the request again through the app after a serialization failure or
// deadlock: nothing was sent, the response is reset to what it was when
// the middleware first saw it, and the body parsers skip the parsed body.
function redispatch(req, res, hold, attempt, entryHeaders) {
  uncapture(res, hold);
  req[kAttempt] = { attempt, entryHeaders };
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  for (const [name, value] of Object.entries(entryHeaders)) res.setHeader(name, value);
  res.statusCode = 200;
  req.url = req.originalUrl;
  req.app.handle(req, res, (err) => respond(res, err
    ? answers.internal('The request failed when it was run again.')
    : answers.internal('No route answered the request when it was run again.')));
}

// a call after the first complete answer: ignored, with a warning (once)
function late(hold, res, name, args) {
  hold.warn(name);
  const cb = args.find((a) => typeof a === 'function');
  if (cb && (name === 'write' || name === 'end')) process.nextTick(cb);
  return name === 'write' ? true : res;
}

function add(hold, chunk, encoding) {
  if (chunk === undefined || chunk === null || typeof chunk === 'function') return;
  const bytes = Buffer.isBuffer(chunk) ? chunk
    : chunk instanceof Uint8Array ? Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
      : Buffer.from(chunk, typeof encoding === 'string' ? encoding : 'utf8');
  hold.size += bytes.length;
  if (hold.size <= hold.limit) hold.chunks.push(bytes);
}

// The held methods of res with its hold: what the handler writes is kept
// until the outcome; sending, or released, the calls go through
function heldWriteHead(hold, res, status, reason, headers) {
  if (hold.sending || hold.released) return hold.saved.writeHead.call(res, status, reason, headers);
  if (hold.ended) return late(hold, res, 'writeHead', [status, reason, headers]);
  res.statusCode = status;
  const h = typeof reason === 'object' ? reason : headers;
  if (Array.isArray(h)) for (let i = 0; i < h.length; i += 2) hold.saved.setHeader.call(res, h[i], h[i + 1]);
  else if (h) for (const [name, value] of Object.entries(h)) hold.saved.setHeader.call(res, name, value);
  return res;
}

function heldWrite(hold, res, chunk, encoding, callback) {
  if (hold.sending || hold.released) return hold.saved.write.call(res, chunk, encoding, callback);
  if (hold.ended) return late(hold, res, 'write', [chunk, encoding, callback]);
  add(hold, chunk, encoding);
  const cb = typeof encoding === 'function' ? encoding : callback;
  if (cb) process.nextTick(cb);
  return true;
}

function heldEnd(hold, res, chunk, encoding, callback) {
  if (hold.sending || hold.released) return hold.saved.end.call(res, chunk, encoding, callback);
  if (hold.ended) return late(hold, res, 'end', [chunk, encoding, callback]);
  add(hold, chunk, encoding);
  hold.ended = true;
  settle(res, hold, [chunk, encoding, callback].find((a) => typeof a === 'function'));
  return res;
}

// setHeader, removeHeader, appendHeader
function heldHeader(hold, res, name, args) {
  if (hold.ended && !hold.sending && !hold.released) return late(hold, res, name, args);
  return hold.saved[name].apply(res, args);
}

// the first end(): the response as it is now, recorded by finalize, then
// sent (or run again, or handed to the error handler)
function settle(res, hold, done) {
  const tooLarge = hold.size > hold.limit;
  const { chunks } = hold;
  const response = {
    status: res.statusCode,
    headers: res.getHeaders(),
    body: tooLarge ? Buffer.alloc(0) : chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, hold.size),
    tooLarge,
  };
  hold.chunks = null;
  hold.finalize(response).then((answer) => {
    if (answer === IGNORED) return;
    if (answer === RETRY) {
      hold.retry();
    } else {
      send(res, hold, answer, answer === response);
      if (done) res.once('finish', done);
    }
  }).catch((err) => {
    // an error the package has no answer for (its outcome could not be
    // recorded; nothing is committed), or one of sending the answer
    // (Node refuses a status outside 100-999): the app's error handler
    // answers it, through the response's own methods
    uncapture(res, hold);
    hold.onError(err);
  });
}

// Holds the response until finalize(response) says what to send; the
// first end() is the answer, anything after it is ignored. Bytes beyond
// limit are not kept (the response is then tooLarge). -> the hold
function capture(res, { finalize, onError, retry, limit, warn }) {
  const hold = {
    saved: {}, sending: false, released: false, ended: false, chunks: [], size: 0,
    finalize, onError, retry, limit, warn,
  };
  for (const name of HELD) hold.saved[name] = res[name];
  res.writeHead = function writeHead(status, reason, headers) { return heldWriteHead(hold, this, status, reason, headers); };
  res.write = function write(chunk, encoding, callback) { return heldWrite(hold, this, chunk, encoding, callback); };
  res.end = function end(chunk, encoding, callback) { return heldEnd(hold, this, chunk, encoding, callback); };
  for (const name of ['setHeader', 'removeHeader', 'appendHeader']) {
    if (typeof hold.saved[name] === 'function') res[name] = function header(...args) { return heldHeader(hold, this, name, args); };
  }
  return hold;
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
    // a run again (redispatch) carries its attempt and the headers the
    // response had when the middleware first saw it
    const again = req[kAttempt];
    const attempt = again ? again.attempt : 0;
    const entryHeaders = again ? again.entryHeaders : res.getHeaders();
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
    // res.req and req.res: set by Express before it set the prototypes
    toDictionaryMode(req, 'res');
    toDictionaryMode(res, 'req');
    req.idempotency = handlerApi(state);
    const hold = capture(res, {
      finalize: (response) => complete(state, response),
      onError: next,
      retry: () => redispatch(req, res, hold, attempt + 1, entryHeaders),
      limit: o.maxResponseBytes,
      warn,
    });
    // an abandoned request (its session ended, its time ran out) is
    // answered at once; what the handler does later is ignored
    state.send = (answer) => {
      res.end(); // the handler's answer from now on: ignored
      send(res, hold, answer);
    };
    return next();
  }

  return function idempotencyMiddleware(req, res, next) {
    if (!o.methods.includes(req.method)) return next();
    return run(req, res, next).catch(next);
  };
}

export { idempotency as expressIdempotency };
