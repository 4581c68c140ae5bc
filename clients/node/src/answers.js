// The HTTP answers of the package: one per case, the same in every client
// package of the extension (see the README's table).
import { problem } from './response.js';

const retryAfter1 = { 'retry-after': '1' };

export const answers = {
  keyMissing: () => problem(400, 'key-missing', 'Idempotency-Key header missing',
    'This operation requires an Idempotency-Key header.'),
  keyInvalid: (detail) => problem(400, 'key-invalid', 'Invalid Idempotency-Key', detail),
  scopeMissing: () => problem(403, 'scope-missing', 'No idempotency scope',
    'The request has no authenticated principal to scope its Idempotency-Key; nothing was done.'),
  inProgress: (seconds) => problem(409, 'in-progress', 'Request in progress',
    'A request with this Idempotency-Key is still being processed; retry after the delay given.',
    { 'retry-after': String(Math.max(1, Math.ceil(seconds))) }),
  unavailable: () => problem(503, 'unavailable', 'Database unavailable',
    'The database session ended or the database is unavailable; nothing of this request was committed'
    + ' (if it ended at COMMIT, a retry with the same key replays or runs it once). Retry with the same key.',
    retryAfter1),
  bodyTooLarge: (limit) => problem(413, 'body-too-large', 'Request body too large',
    `The request body is over ${limit} bytes; nothing was done.`),
  responseTooLarge: (limit) => problem(500, 'response-too-large', 'Response too large to store',
    `The response is over ${limit} bytes, the most this service stores for a replay; nothing was committed.`),
  transactionEnded: () => problem(500, 'transaction-ended', 'Transaction ended by the handler',
    'The handler ended the request\'s transaction itself; its later statements were refused and nothing was committed.'),
  handlerTimeout: (seconds) => problem(503, 'handler-timeout', 'Request took too long',
    'The request did not finish in time and was abandoned; a retry with the same key takes it over after the delay given.',
    { 'retry-after': String(Math.max(1, Math.ceil(seconds))) }),
  internal: (detail) => problem(500, 'internal', 'Internal Server Error', detail),
};

// SQLSTATEs of an outage or an ended session: class 08, the shutdown and
// cancel codes, the idle-in-transaction timeout, too many connections
const UNAVAILABLE = new Set(['57P01', '57P02', '57P03', '57014', '25P03', '53300']);
// Citus, right after a shard move
const CITUS = {
  25001: /cannot perform query on placements/,
  XX000: /cannot execute a distributed query from a query on a shard|could not commit transaction/,
};

const hasSqlstate = (err) => Boolean(err) && typeof err.code === 'string' && /^[0-9A-Z]{5}$/.test(err.code)
  && err.severity !== undefined;

// -> whether err says the database is unavailable or the session ended.
// An error without a SQLSTATE from the package's own database calls (the
// pool cannot connect, the connection closed) is one too: see ownCallError.
export function isUnavailable(err) {
  if (!hasSqlstate(err)) return false;
  if (err.code.startsWith('08') || UNAVAILABLE.has(err.code)) return true;
  const citus = CITUS[err.code];
  return Boolean(citus && citus.test(String(err.message)));
}

// The answer of an error of the package's own call to the database, or
// null (a bug: the framework's error handling answers it).
export function ownCallAnswer(err) {
  if (!hasSqlstate(err)) return answers.unavailable();
  return answerOf(err);
}

// The answer of an error of the outcome's statement (idem_finish_response,
// COMMIT): as ownCallAnswer, except that a value refused there (22004,
// 22023, 22008) is the response's, a status or header a replay could not
// send, not the key's: passed on (null), as any error without an answer.
export function outcomeAnswer(err) {
  return hasSqlstate(err) && REFUSED_VALUE.has(err.code) ? null : ownCallAnswer(err);
}

export const RETRYABLE = new Set(['40001', '40P01']);
// a value the extension refused: at the claim, the key, scope or an interval
const REFUSED_VALUE = new Set(['22023', '22004', '22008']);

// The HTTP answer of a SQLSTATE, or null (passed to the framework's error
// handling).
export function answerOf(err) {
  if (isUnavailable(err)) return answers.unavailable();
  switch (err && err.code) {
    case 'IK001':
      return problem(422, 'key-reused', 'Idempotency-Key reused',
        'This Idempotency-Key was used with another request (method, path or body).');
    case 'IK002': case 'IK003':
      return problem(409, 'claim-lost', 'Idempotency-Key taken over',
        'The claim of this request ended before its outcome was recorded; nothing was committed.', retryAfter1);
    case '42501':
      return problem(403, 'scope-forbidden', 'Idempotency scope not granted',
        'The database role may not use this idempotency scope.');
    case '25006':
      return problem(503, 'read-only', 'Database read-only',
        'The database is read-only (a standby or a read-only transaction); retry later.', retryAfter1);
    case '40001': case '40P01':
      return problem(503, 'retry', 'Transaction conflict',
        'The transaction was rolled back by a serialization failure or deadlock; retry the request.', retryAfter1);
    default:
      return REFUSED_VALUE.has(err && err.code) ? answers.keyInvalid(err.message) : null;
  }
}
