// pg-idempotency-key: Idempotency-Key handling for Express and Fastify on
// the idempotency PostgreSQL extension. Neither entry imports its
// framework: an Express app loads no Fastify code and the reverse
// (pg-idempotency-key/express and pg-idempotency-key/fastify load one).
export { idempotency as expressIdempotency } from './express.js';
export { idempotency as fastifyIdempotency } from './fastify.js';
