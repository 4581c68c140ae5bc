// Type declarations of pg-idempotency-key/knex.
import type { Knex } from 'knex';
import type { IdempotencyHandle } from './index.js';

/**
 * The Knex transaction (trx) of the request: your knex.transaction() on the claim's client, in the claim's
 * transaction; it commits with the stored response. trx.commit() and trx.rollback() are refused (the request
 * answers 500 transaction-ended). The same trx for every call of one request.
 */
export function knexTransaction(idempotency: IdempotencyHandle, knex: Knex): Promise<Knex.Transaction>;
