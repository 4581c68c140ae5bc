// pg-idempotency-key/knex: knexTransaction(req.idempotency, knex) -> a
// Knex Transaction (trx) in the claim's transaction. knex.transaction()
// is given the claim's client as its connection; its BEGIN is answered
// without a round trip (claim-pool.js), so trx runs no statement of its
// own. The middleware commits it with the stored response: trx.commit()
// and trx.rollback() send COMMIT / ROLLBACK, which the guard refuses (the
// request answers 500 transaction-ended, nothing committed). Savepoints
// (trx.transaction(...), trx.savepoint()) work as in Knex.
import { claimClient } from './claim-pool.js';
import { perRequest } from './per-request.js';

export function knexTransaction(idempotency, knex) {
  if (typeof knex !== 'function' || typeof knex.transaction !== 'function' || !knex.client) {
    throw new TypeError('idempotency: knexTransaction(req.idempotency, knex) takes your knex instance');
  }
  if (knex.client.dialect !== 'postgresql') {
    throw new TypeError(`idempotency: knexTransaction needs knex's "pg" client, not ${knex.client.dialect}`);
  }
  if (typeof knex.isTransaction === 'boolean' && knex.isTransaction) {
    throw new TypeError('idempotency: knexTransaction takes the knex instance, not a transaction');
  }
  return perRequest(idempotency, knex, (client) => knex.transaction({ connection: claimClient(client) }));
}
