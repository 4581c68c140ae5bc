// pg-idempotency-key/outbox: a relay for the extension's transactional
// outbox and a consumer wrapper that deduplicates by message ID (the
// inbox), on RabbitMQ through amqplib.
export { createRelay } from './relay.js';
export { createConsumer } from './consumer.js';
