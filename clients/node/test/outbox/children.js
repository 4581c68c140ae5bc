// A relay or a consumer in a process of its own, for the tests to kill
// with SIGKILL at a chosen point (node children.js relay|consumer QUEUE).
// It prints one line at that point and then hangs:
//   relay: "confirmed" after the broker confirmed the batch, before the mark
//   consumer: "in handler" after the handler's insert, before its commit
import pg from 'pg';
import { createRelay, createConsumer } from '../../src/outbox/index.js';

const [role, queue] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: process.env.IDEM_TEST_DSN, max: 2 });
pool.on('error', () => {});
const hang = () => new Promise(() => {});

if (role === 'relay') {
  // the pool as the relay sees it: the mark never reaches the database
  const stalling = {
    query(text, params) {
      if (text.includes('idem_outbox_mark_sent')) {
        process.stdout.write('confirmed\n');
        return hang();
      }
      return pool.query(text, params);
    },
  };
  const relay = createRelay({ pool: stalling, url: process.env.IDEM_TEST_AMQP_URL, lease: '1 hour' });
  await relay.runOnce();
} else if (role === 'consumer') {
  const consumer = createConsumer({
    pool, url: process.env.IDEM_TEST_AMQP_URL, queue,
    handler: async ({ client, messageId }) => {
      await client.query('INSERT INTO outbox_effects (queue, message_id) VALUES ($1, $2)', [queue, messageId]);
      process.stdout.write('in handler\n');
      await hang();
    },
  });
  await consumer.start();
} else {
  throw new Error(`unknown role ${role}`);
}
