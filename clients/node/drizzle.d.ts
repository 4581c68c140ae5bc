// Type declarations of pg-idempotency-key/drizzle.
import type { DrizzleConfig } from 'drizzle-orm';
import type { NodePgDatabase } from 'drizzle-orm/node-postgres';
import type { PoolClient } from 'pg';
import type { IdempotencyHandle } from './index.js';

/**
 * The Drizzle database of the request, over the claim's client: every statement runs in the claim's
 * transaction, which commits with the stored response; db.transaction() on it is refused (500
 * transaction-ended). The same one for every call of one request with the same config object.
 */
export function drizzleDatabase<TSchema extends Record<string, unknown> = Record<string, never>>(
  idempotency: IdempotencyHandle,
  config?: DrizzleConfig<TSchema>,
): Promise<NodePgDatabase<TSchema> & { $client: PoolClient }>;
