// pg-idempotency-key/kysely: kyselyTransaction(req.idempotency, config?)
// -> a Kysely Transaction in the claim's transaction: a Kysely instance
// over claimPool(client) (a pool that always hands out the claim's client)
// with config's plugins and log, and its transaction begun with
// startTransaction(); that BEGIN is answered without a round trip
// (claim-pool.js). The middleware commits it with the stored response: a
// commit() or rollback() of the handler is refused by the guard (500
// transaction-ended, nothing committed); savepoints work as in Kysely.
import { Kysely, PostgresDialect } from 'kysely';
import { claimPool } from './claim-pool.js';
import { perRequest } from './per-request.js';

const defaults = {};

export function kyselyTransaction(idempotency, config = defaults) {
  if (config && config.dialect) {
    throw new TypeError('idempotency: kyselyTransaction(req.idempotency, config) takes the Kysely config without'
      + ' a dialect (its plugins, log): the dialect is the claim\'s client');
  }
  return perRequest(idempotency, config ?? defaults, (client) => new Kysely({
    ...config,
    dialect: new PostgresDialect({ pool: claimPool(client) }),
  }).startTransaction().execute());
}
