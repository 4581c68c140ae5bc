// Type declarations of pg-idempotency-key/kysely.
import type { KyselyConfig, Transaction } from 'kysely';
import type { IdempotencyHandle } from './index.js';

/**
 * The Kysely transaction of the request: a Kysely instance over the claim's client with config's plugins and
 * log, its transaction the claim's; it commits with the stored response. The same one for every call of one
 * request with the same config object.
 */
export function kyselyTransaction<DB>(
  idempotency: IdempotencyHandle,
  config?: Omit<KyselyConfig, 'dialect'>,
): Promise<Transaction<DB>>;
