// A pg.Pool-shaped facade over the claim's client (req.idempotency.client,
// the guard of session.js), for ORMs that take a pool and open their own
// transactions on it: connect() hands out that one client, release() is
// a no-op (the package releases it), and the ORM's own transaction
// control maps onto the claim's transaction, which commits with the
// stored response:
// - BEGIN / START TRANSACTION and COMMIT are answered here, not sent: the
//   claim's transaction is already open and the package commits it;
// - ROLLBACK (not ROLLBACK TO SAVEPOINT) goes to the guard, which refuses
//   it and marks the request's transaction ended: nothing commits, the
//   request answers 500 transaction-ended;
// - everything else (savepoints included) goes to the claim's client.
//
// claimPool(client) -> { connect(), query(), on(), removeListener(), end() }
import { EventEmitter } from 'node:events';

const START = /^\s*(?:BEGIN|START\s+TRANSACTION)\b/i;
const COMMIT = /^\s*(?:COMMIT|END)\s*;?\s*$/i;
const ROLLBACK = /^\s*(?:ROLLBACK|ABORT)\s*;?\s*$/i;

const textOf = (config) => (typeof config === 'string' ? config : config && config.text);
const answered = (command) => ({ command, rowCount: 0, rows: [], fields: [] });

// -> the client as the ORM sees it
function facade(client) {
  const emitter = new EventEmitter();
  const query = (config, values, callback) => {
    const text = textOf(config);
    const cb = typeof values === 'function' ? values : callback;
    let result;
    if (typeof text === 'string' && (START.test(text) || COMMIT.test(text))) {
      result = Promise.resolve(answered(START.test(text) ? 'BEGIN' : 'COMMIT'));
    } else if (typeof text === 'string' && ROLLBACK.test(text)) {
      // refused by the guard, which dooms the request: the ORM's rollback
      // itself succeeds (its transaction is rolled back with the claim's)
      result = client.query('ROLLBACK').then(() => answered('ROLLBACK'), () => answered('ROLLBACK'));
    } else {
      return client.query(config, values, callback);
    }
    if (!cb) return result;
    result.then((r) => cb(null, r), cb);
    return undefined;
  };
  return Object.assign(emitter, {
    query,
    release() {},
    get processID() { return client.processID; },
  });
}

export function claimPool(client) {
  const one = facade(client);
  return Object.assign(new EventEmitter(), {
    connect: async () => one,
    query: (...args) => one.query(...args),
    end: async () => {},
    totalCount: 1,
    idleCount: 0,
    waitingCount: 0,
  });
}
