// pg-idempotency-key/drizzle: drizzleDatabase(req.idempotency, config?) ->
// a Drizzle database (drizzle-orm/node-postgres) over the claim's client:
// every statement runs in the claim's transaction, which the middleware
// commits with the stored response. config is drizzle's (schema, casing,
// logger). db.transaction(...) on it sends BEGIN, which the guard refuses
// (500 transaction-ended, nothing committed): write on db directly.
import { drizzle } from 'drizzle-orm/node-postgres';
import { perRequest } from './per-request.js';

const defaults = {};

export function drizzleDatabase(idempotency, config = defaults) {
  if (config && (config.client || config.connection)) {
    throw new TypeError('idempotency: drizzleDatabase(req.idempotency, config) takes drizzle\'s config without a'
      + ' client or connection: the client is the claim\'s');
  }
  return perRequest(idempotency, config ?? defaults, (client) => drizzle({ ...config, client }));
}
