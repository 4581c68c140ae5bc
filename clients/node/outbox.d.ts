// Types of pg-idempotency-key/outbox (src/outbox/): the outbox relay and
// the inbox consumer on RabbitMQ (amqplib).
import type { Pool, PoolClient } from 'pg';

export interface RelayOptions {
  /** node-postgres pool; every claim and mark is a statement of its own (autocommit) */
  pool: Pick<Pool, 'query'>;
  /** the broker's URL, for amqplib's connect */
  url?: string;
  /** the amqplib module to use (default: import('amqplib')) */
  amqp?: unknown;
  /** exchange to publish to; '' (default): the default exchange, destination = queue name */
  exchange?: string;
  /** messages per claim (default 100) */
  batchSize?: number;
  /** lease of a claim, a PostgreSQL interval (default '1 minute'): longer than publishing and confirming a batch */
  lease?: string;
  /** when a failed message is claimable again, an interval (default '10 seconds') */
  retryAfter?: string;
  /** claims after which a failed message is given up (dead) (default 10) */
  maxAttempts?: number;
  /** pause after an empty claim, ms (default 500) */
  idleDelayMs?: number;
  /** pause after a failed batch, ms (default 1000) */
  errorDelayMs?: number;
  /** a confirm that takes longer counts as a failure, ms (default 30000) */
  confirmTimeoutMs?: number;
  /** every error the relay survived */
  onError?: (err: unknown) => void;
}

export interface Relay {
  /** one claim, publish and mark */
  runOnce(): Promise<{ claimed: number; sent: number; failed: number }>;
  /** run the loop until stop() */
  start(): Relay;
  /** end the loop after the batch in hand; close the broker connection */
  stop(): Promise<void>;
}

export interface Delivery<P = unknown> {
  /** the claim's client, inside its transaction: write the effect here; never COMMIT or ROLLBACK on it */
  client: PoolClient;
  /** the message body, parsed as JSON */
  payload: P;
  /** the message ID (properties.messageId), the inbox key */
  messageId: string;
  /** amqplib's message */
  message: unknown;
}

export interface ConsumerOptions<P = unknown> {
  pool: Pool;
  url?: string;
  amqp?: unknown;
  /** the queue to consume (declared durable unless assertQueue is false) */
  queue: string;
  /** the effect; it runs once per message ID */
  handler: (delivery: Delivery<P>) => Promise<void>;
  /** the inbox's scope (default 'inbox:' + queue) */
  scope?: string;
  /** how long a message ID is remembered, an interval (default '7 days'): longer than the broker's redelivery window */
  ttl?: string;
  /** unacknowledged deliveries at once (default 10) */
  prefetch?: number;
  /** pause before reconnecting to the broker, ms (default 1000) */
  reconnectDelayMs?: number;
  /** declare the queue durable before consuming (default true) */
  assertQueue?: boolean;
  onError?: (err: unknown) => void;
}

export interface Consumer {
  stats: { handled: number; duplicates: number; requeued: number; rejected: number };
  /** start consuming; rejects when the broker is unreachable */
  start(): Promise<Consumer>;
  /** stop consuming; deliveries in hand finish first */
  stop(): Promise<void>;
}

export function createRelay(options: RelayOptions): Relay;
export function createConsumer<P = unknown>(options: ConsumerOptions<P>): Consumer;
