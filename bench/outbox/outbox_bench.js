// make bench, B12: messages per second end to end, producer transaction →
// relay → RabbitMQ → consumer effect, with clients/node's outbox relay and
// inbox consumer (exactly-once effects), or with a plain publish after the
// commit and a consumer with automatic acks (no guarantee: a crash between
// commit and publish loses the message, a crash in the handler loses the
// effect, a redelivery doubles it).  Both do the same business write in
// the producer's transaction and the same effect row in the consumer.
//
//   node outbox_bench.js outbox|plain MESSAGES PRODUCERS   (scripts/bench.sh)
//
// BENCH_DSN names the database (the extension, tables bench_outbox_order and
// bench_outbox_effect), BENCH_AMQP_URL the broker.  Prints one JSON line:
// messages, seconds (first producer transaction to last effect), rate, and
// for the outbox the relay's lag: the largest outbox_lag_seconds sampled
// every 100 ms (the oldest unsent message's age) and the mean seconds from
// enqueue to mark sent (idempotency_stats' counters, before and after).
import { createRequire } from 'node:module';
import { createRelay, createConsumer } from '../../clients/node/src/outbox/index.js';

// pg and amqplib as clients/node has them (its npm ci)
const require = createRequire(new URL('../../clients/node/package.json', import.meta.url));
const pg = require('pg');
const amqp = require('amqplib');

const [mode, messagesArg, producersArg] = process.argv.slice(2);
const messages = Number(messagesArg);
const producers = Number(producersArg);
if (!['outbox', 'plain'].includes(mode) || !(messages > 0) || !(producers > 0)) {
  throw new Error('usage: outbox_bench.js outbox|plain MESSAGES PRODUCERS');
}
const url = process.env.BENCH_AMQP_URL;
const queue = `bench-outbox-${mode}`;
const pool = new pg.Pool({ connectionString: process.env.BENCH_DSN, max: 20 });
pool.on('error', () => {});
const errors = [];
const onError = (e) => errors.push(e);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, check, seconds = 600) {
  const end = Date.now() + seconds * 1000;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}; errors: ${errors.slice(0, 5).map(String).join('; ')}`);
    await sleep(20);
  }
}
const counters = async () => (await pool.query(
  'SELECT outbox_sent::float8 AS sent, outbox_send_lag_seconds_sum AS lag_sum FROM idempotency_stats')).rows[0];

// producers: each its share of the messages, one transaction per message
async function produce(send) {
  let next = 0;
  await Promise.all(Array.from({ length: producers }, async () => {
    while (next < messages) {
      const n = next++;
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query('INSERT INTO bench_outbox_order (n) VALUES ($1)', [n]);
        if (mode === 'outbox') await client.query('SELECT idem_outbox_enqueue($1, $2)', [queue, { n }]);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      if (mode === 'plain') await send(n);
    }
  }));
}

const admin = await amqp.connect(url);
const adminChannel = await admin.createChannel();
await adminChannel.assertQueue(queue, { durable: true });
await adminChannel.purgeQueue(queue);
await pool.query('TRUNCATE bench_outbox_order, bench_outbox_effect, idempotency_outbox');
await pool.query('DELETE FROM idempotent_record WHERE scope = $1', [`inbox:${queue}`]);

const result = { mode, messages, producers };
let t0;
if (mode === 'outbox') {
  const consumer = createConsumer({
    pool, url, queue, prefetch: 50, onError,
    handler: async ({ client, payload, messageId }) => {
      await client.query('INSERT INTO bench_outbox_effect (n, message_id) VALUES ($1, $2)', [payload.n, messageId]);
    },
  });
  await consumer.start();
  const relay = createRelay({ pool, url, batchSize: 100, idleDelayMs: 20, onError });
  const before = await counters();
  let maxLag = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const { rows } = await pool.query('SELECT outbox_lag_seconds FROM idempotency_stats');
      maxLag = Math.max(maxLag, rows[0].outbox_lag_seconds);
      await sleep(100);
    }
  })();
  t0 = process.hrtime.bigint();
  relay.start();
  await produce();
  await until(`${messages} effects`, () => consumer.stats.handled >= messages);
  result.seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  sampling = false;
  await sampler;
  await relay.stop();
  await consumer.stop();
  const after = await counters();
  result.max_lag_seconds = maxLag;
  result.mean_send_lag_seconds = (after.lag_sum - before.lag_sum) / Math.max(after.sent - before.sent, 1);
  result.duplicates = consumer.stats.duplicates;
} else {
  // publish after the commit, no confirms, not persistent; consume with
  // automatic acks, the effect in autocommit
  const conn = await amqp.connect(url);
  const pub = await conn.createChannel();
  const sub = await conn.createChannel();
  let done = 0;
  await sub.consume(queue, (msg) => {
    const { n } = JSON.parse(msg.content.toString('utf8'));
    pool.query('INSERT INTO bench_outbox_effect (n, message_id) VALUES ($1, $2)', [n, msg.properties.messageId])
      .then(() => { done++; }, onError);
  }, { noAck: true });
  const send = async (n) => {
    if (!pub.publish('', queue, Buffer.from(JSON.stringify({ n })), { messageId: `plain-${n}` })) {
      await new Promise((r) => pub.once('drain', r));
    }
  };
  t0 = process.hrtime.bigint();
  await produce(send);
  await until(`${messages} effects`, () => done >= messages);
  result.seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  await conn.close();
}
result.rate = messages / result.seconds;
const { rows } = await pool.query('SELECT count(*)::int AS effects, count(DISTINCT n)::int AS distinct_effects FROM bench_outbox_effect');
Object.assign(result, rows[0]);
await admin.close();
await pool.end();
console.log(JSON.stringify(result));
