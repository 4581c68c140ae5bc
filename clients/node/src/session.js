// The connections the package holds, from pool.connect() to release:
// - an 'error' listener for the whole checkout: a session the server ends
//   (idle_in_transaction_session_timeout, pg_terminate_backend, a failover
//   or restart) makes node-postgres emit 'error', which with no listener
//   ends the Node process; here it is noted, reported to the request, and
//   the client is destroyed at release, never reused;
// - for the client handed to a handler (the claim's transaction), a guard:
//   statements that end the transaction (COMMIT, ROLLBACK, BEGIN, ...) are
//   refused before they are sent, the transaction status of every
//   ReadyForQuery is watched (a COMMIT inside a multi-statement string is
//   seen once it ran), and once the transaction ended or the request is
//   over every statement is refused.
import { isUnavailable } from './answers.js';
import { endsTransaction } from './transaction-control.js';

const kSession = Symbol('pg-idempotency-key session');
const noop = () => {};

// -> a pooled client with the listener; onBroken(err) is called once if
// the session ends while the package holds it
export async function checkout(pool, onBroken = noop) {
  const client = await pool.connect();
  const session = { broken: null, onBroken, listener: null, ready: null };
  session.listener = (err) => {
    if (session.broken) return;
    session.broken = err;
    session.onBroken(err);
  };
  client.on('error', session.listener);
  client[kSession] = session;
  return client;
}

export const brokenOf = (client) => client[kSession]?.broken ?? null;
export const onBroken = (client, callback) => { if (client[kSession]) client[kSession].onBroken = callback; };

// Back to the pool; destroyed (release(err)) when the session ended or err
// says the connection is unusable.
export function release(client, err) {
  const session = client[kSession];
  // not deleted: a deleted property turns the client into a slower
  // dictionary-mode object for the rest of its life
  client[kSession] = null;
  if (session) {
    if (session.ready && client.connection) client.connection.removeListener('readyForQuery', session.ready);
    client.removeListener('error', session.listener);
  }
  const broken = session?.broken
    ?? (err && (isUnavailable(err) || typeof err.severity === 'undefined') ? err : undefined);
  // a destroyed client may still report its socket's end: not unhandled
  if (broken) client.on('error', noop);
  client.release(broken);
}

export class TransactionEnded extends Error {
  constructor(message) {
    super(`idempotency: ${message}`);
    this.name = 'TransactionEnded';
  }
}

const refuse = (err, config, values, callback) => {
  const cb = typeof values === 'function' ? values : typeof callback === 'function' ? callback
    : config && typeof config.callback === 'function' ? config.callback : null;
  if (config && typeof config.submit === 'function') {
    process.nextTick(() => (config.handleError ? config.handleError(err) : cb && cb(err)));
    return config;
  }
  if (cb) {
    process.nextTick(cb, err);
    return undefined;
  }
  return Promise.reject(err);
};

// -> the client as the handler sees it (a Proxy): query() guarded as
// above, release() refused (the package releases it). state gets
// transactionEnded (true once ended) and lastError (the last error of the
// handler's statements: a 40001 there is retried, an outage answered 503).
export function guarded(client, state) {
  const session = client[kSession];
  session.ready = (msg) => {
    if (msg && msg.status === 'I' && !state.done) state.transactionEnded = true;
  };
  if (client.connection) client.connection.on('readyForQuery', session.ready);
  const query = function guardedQuery(config, values, callback) {
    if (state.done || client[kSession] !== session) {
      return refuse(new TransactionEnded('the request is over: its client is back in the pool'), config, values, callback);
    }
    if (state.transactionEnded) {
      return refuse(new TransactionEnded('the request\'s transaction was ended by the handler; statements are refused'),
        config, values, callback);
    }
    const text = typeof config === 'string' ? config : config && config.text;
    if (typeof text === 'string' && endsTransaction(text)) {
      state.transactionEnded = true;
      return refuse(new TransactionEnded('transaction control (BEGIN, COMMIT, ROLLBACK, ...) on the request\'s client'
        + ' is refused: its transaction commits with the stored response'), config, values, callback);
    }
    const result = client.query(config, values, callback);
    if (result && typeof result.then === 'function') {
      result.then(null, (err) => { state.lastError = err; });
    }
    return result;
  };
  const refusedRelease = () => {
    throw new Error('idempotency: the request\'s client is released by the package, not by the handler');
  };
  return new Proxy(client, {
    get(target, prop) {
      if (prop === 'query') return query;
      if (prop === 'release') return refusedRelease;
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
