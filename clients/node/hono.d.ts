// Type declarations of pg-idempotency-key/hono.
import type { Context, MiddlewareHandler } from 'hono';
import type { IdempotencyHandle, IdempotencyOptions } from './index.js';

export type { IdempotencyHandle, IdempotencyOptions } from './index.js';

/** The middleware: the handler reads c.get('idempotency'). */
export function honoIdempotency(options: IdempotencyOptions<Context>):
  MiddlewareHandler<{ Variables: { idempotency: IdempotencyHandle } }>;
export { honoIdempotency as idempotency };
