// Type declarations of pg-idempotency-key.
import type { Pool, PoolClient } from 'pg';
import type { RequestHandler } from 'express';
import type { FastifyPluginCallback } from 'fastify';

/** Settings; every one may be given per route (see README). */
export interface IdempotencyOptions<Req = unknown> {
  /** The pool the claims, the handler's transaction and the outcomes use. */
  pool: Pick<Pool, 'connect'>;
  /**
   * Required. The idempotency scope: a function of the request returning the authenticated principal your
   * application established (never a header the caller chooses), or a non-empty string for one shared scope.
   * A function giving null, undefined or '' answers 403 scope-missing, nothing claimed.
   */
  scope: string | ((req: Req) => string | number | null | undefined | Promise<string | number | null | undefined>);
  /** A request without an Idempotency-Key is refused with 400 (true, default) or handled unprotected (false). */
  required?: boolean;
  /** Methods the middleware handles when mounted for all (default POST, PATCH). */
  methods?: string[];
  /**
   * Response headers stored and replayed with the status and body, an allowlist (default content-type,
   * content-language, content-location, location, etag, last-modified, link, cache-control, vary).
   * set-cookie and set-cookie2 are refused at setup.
   */
  storedHeaders?: string[];
  /** Store and replay 4xx answers (default true); false rolls them back like a 5xx. */
  storeClientErrors?: boolean;
  /** How long a record answers duplicates, in milliseconds (default: the server's idempotency.default_ttl). */
  ttl?: number | null;
  /** Leased mode: the claim commits on its own with this lease, in milliseconds (default null: in-transaction). */
  lease?: number | null;
  /** Leased mode: idem_extend_lease every this many milliseconds while the handler runs (default lease / 3; 0: never). */
  heartbeat?: number | null;
  /** Leased mode: a handler that has not answered after this many milliseconds is abandoned (503 handler-timeout); the heartbeat stops and a retry takes over after the lease (default 300000; 0: never). */
  handlerTimeout?: number;
  /** A request whose Content-Length is over this many bytes answers 413 body-too-large (default 10 MiB). */
  maxBodyBytes?: number;
  /** The largest response stored, in bytes; a larger one answers 500 response-too-large, rolled back (default 10 MiB; at most 200000000, refused at setup above). */
  maxResponseBytes?: number;
  /** How long a duplicate of a request in flight polls for its outcome, in milliseconds, before 409 (default 0). */
  waitFor?: number;
  /** A duplicate of a request in another process: first poll after this many ms (with jitter), doubling up to the server's retry_after (default 25). */
  pollFrom?: number;
  /** Re-runs of a request after 40001 or 40P01 (default 3). */
  retries?: number;
  /** Named statements for the claim and idem_finish_response, parsed once per connection (default false; not behind a transaction-pooling PgBouncer). */
  prepare?: boolean;
  /** Longest key accepted, in characters (default 255, the server's default idempotency.max_key_length). */
  maxKeyLength?: number;
}

/** What a handler gets as req.idempotency (Express) or request.idempotency (Fastify). */
export interface IdempotencyHandle {
  /** The Idempotency-Key, or null on an optional route without one. */
  readonly key: string | null;
  readonly scope: string | null;
  /** The fencing token of the claim (1, + 1 per takeover). */
  readonly fence: number | null;
  /** The last recovery point saved by idem_checkpoint before a takeover. */
  readonly recoveryPoint: string | null;
  /** The client in the claim's transaction (in-transaction mode), else null until begin(); transaction control on it is refused, release() is the package's. */
  readonly client: PoolClient | null;
  /** The client in the transaction the outcome commits with (taken on first use in leased mode), guarded as client is. */
  begin(): Promise<PoolClient>;
  /** Leased mode: heartbeat, the lease ends at server time + ms (default the route's lease). */
  extendLease(ms?: number): Promise<Date>;
  /** Leased mode: saves a recovery point, committed at once. */
  checkpoint(recoveryPoint: string): Promise<void>;
  /** Leased mode: the outcome of an outside call is unknown; nothing is recorded for this response. */
  markUnknown(detail?: unknown): Promise<void>;
}

export function expressIdempotency(options: IdempotencyOptions<import('express').Request>): RequestHandler;

export const fastifyIdempotency: FastifyPluginCallback<IdempotencyOptions<import('fastify').FastifyRequest>>;

declare module 'express-serve-static-core' {
  interface Request {
    idempotency?: IdempotencyHandle;
  }
}

declare module 'fastify' {
  interface FastifyRequest {
    idempotency: IdempotencyHandle | null;
  }
  interface FastifyContextConfig {
    /** Per-route settings, or false to turn the plugin off for the route. */
    idempotency?: false | true | Partial<Omit<IdempotencyOptions<FastifyRequest>, 'pool'>>;
  }
}
