// pg-idempotency-key: Idempotency-Key handling for Express and Fastify on
// the idempotency PostgreSQL extension.
export { idempotency as expressIdempotency } from './express.js';
export { idempotency as fastifyIdempotency } from './fastify.js';
