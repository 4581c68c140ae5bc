// The claim's client in the shapes ORMs take: a connection (claimClient)
// and a pg.Pool (claimPool) that always hands out that one connection.
// Over the guarded client of req.idempotency (session.js), so every
// statement keeps its guard: COMMIT, ROLLBACK and a second BEGIN are refused
// and end the request with 500 transaction-ended.
//
// claimClient(client) -> a client that forwards everything to client, with:
// - the ORM's own BEGIN (a bare BEGIN or START TRANSACTION, the first one
//   it sends) answered here with no round trip: the transaction the ORM
//   opens is the claim's, already open;
// - callback-style queries sent in promise style, so the guard records
//   their errors as it does the handler's (a 40001 re-runs the request, an
//   outage answers 503, as for req.idempotency.client);
// - release() doing nothing: the package releases the claim's client.
//
// claimPool(client) -> {connect(), query(...), end(), on(), off()}:
// connect() resolves to claimClient(client) (the same one every time),
// query() runs on it, end() does nothing (the pool is the application's).
//
// transactionPool(client) -> the same pool shape, for ORMs whose own
// transaction wraps the handler's work and always ends it (Prisma's
// $transaction, TypeORM's QueryRunner): every BEGIN and COMMIT is answered
// here (the claim's transaction is already open and the package commits
// it with the stored response); a ROLLBACK goes to the guard, which
// refuses it and dooms the request (500 transaction-ended, nothing
// committed) while the ORM's own rollback resolves.
import { EventEmitter } from 'node:events';

const OPENING = /^\s*(?:BEGIN|START\s+TRANSACTION)\s*;?\s*$/i;
const START = /^\s*(?:BEGIN|START\s+TRANSACTION)\b/i;
const ENDING = /^\s*(?:COMMIT|END)\s*;?\s*$/i;
const ROLLBACK = /^\s*(?:ROLLBACK|ABORT)\s*;?\s*$/i;

const textOf = (config) => (typeof config === 'string' ? config : config && config.text);

// what node-postgres resolves for a transaction command
const answered = (command) => ({
  command, rowCount: null, oid: null, rows: [], fields: [], rowAsArray: false,
});

function settle(promise, callback) {
  if (!callback) return promise;
  promise.then((result) => callback(null, result), (err) => callback(err));
  return undefined;
}

export function claimClient(client) {
  let joined = false;
  const query = function claimQuery(config, values, callback) {
    const cb = typeof values === 'function' ? values : typeof callback === 'function' ? callback
      : config && typeof config === 'object' && typeof config.callback === 'function' ? config.callback : null;
    const params = typeof values === 'function' ? undefined : values;
    if (config && typeof config.submit === 'function') return client.query(config, values, callback);
    const text = textOf(config);
    if (!joined && typeof text === 'string' && OPENING.test(text)) {
      joined = true;
      return settle(Promise.resolve(answered('BEGIN')), cb);
    }
    if (!cb) return client.query(config, params);
    const { callback: _ignored, ...rest } = typeof config === 'object' ? config : { text: config };
    return settle(client.query(typeof config === 'object' ? rest : config, params), cb);
  };
  // properties an ORM sets on its connection (knex's __knexTxId) stay on
  // the facade, off the pooled client
  const own = { query, release: () => {} };
  return new Proxy(client, {
    get: (target, prop) => (Object.hasOwn(own, prop) ? own[prop] : Reflect.get(target, prop)),
    set: (target, prop, value) => { own[prop] = value; return true; },
    deleteProperty: (target, prop) => delete own[prop],
  });
}

// a pg.Pool's shape over one connection, handed out by every connect()
function poolOver(connection) {
  return Object.assign(new EventEmitter(), {
    connect: (callback) => {
      if (!callback) return Promise.resolve(connection);
      process.nextTick(callback, null, connection, connection.release);
      return undefined;
    },
    query: (...args) => connection.query(...args),
    end: (callback) => settle(Promise.resolve(), callback),
    totalCount: 1,
    idleCount: 0,
    waitingCount: 0,
  });
}

export function claimPool(client) {
  return poolOver(claimClient(client));
}

// the client as an ORM with its own transaction sees it (transactionPool)
function transactionClient(client) {
  const query = (config, values, callback) => {
    const text = textOf(config);
    const cb = typeof values === 'function' ? values : callback;
    let result;
    if (typeof text === 'string' && (START.test(text) || ENDING.test(text))) {
      result = Promise.resolve(answered(START.test(text) ? 'BEGIN' : 'COMMIT'));
    } else if (typeof text === 'string' && ROLLBACK.test(text)) {
      // refused by the guard, which dooms the request: the ORM's rollback
      // itself succeeds (its transaction is rolled back with the claim's)
      result = client.query('ROLLBACK').then(() => answered('ROLLBACK'), () => answered('ROLLBACK'));
    } else {
      return client.query(config, values, callback);
    }
    return settle(result, cb);
  };
  return Object.assign(new EventEmitter(), {
    query,
    release() {},
    get processID() { return client.processID; },
  });
}

export function transactionPool(client) {
  return poolOver(transactionClient(client));
}
