// The outbox relay and the inbox consumer against a real RabbitMQ and the
// extension: what the README's "Messaging" section promises, each with its
// fault.  IDEM_TEST_DSN names the database, IDEM_TEST_AMQP_URL the broker;
// IDEM_TEST_RABBITMQ_DIR and IDEM_TEST_RABBITMQ_PORT let the restart test
// stop and start it (scripts/rabbitmq.sh).  Every wait polls for a state
// with a generous bound; lease ends are simulated by moving available_at.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import pg from 'pg';
import amqp from 'amqplib';
import { createRelay, createConsumer } from '../../src/outbox/index.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const dsn = process.env.IDEM_TEST_DSN;
const url = process.env.IDEM_TEST_AMQP_URL;
if (!dsn || !url) throw new Error('IDEM_TEST_DSN and IDEM_TEST_AMQP_URL must name the database and the broker');

const pool = new pg.Pool({ connectionString: dsn, max: 12 });
let admin;        // a broker connection for declarations and queue counts
let adminChannel;
const running = [];   // relays and consumers to stop after each test
const errors = [];    // what they survived, shown when a test fails

async function adminConnect() {
  admin = await amqp.connect(url);
  admin.on('error', () => {});
  adminChannel = await admin.createChannel();
  adminChannel.on('error', () => {});
}

before(async () => {
  await pool.query(`CREATE TABLE IF NOT EXISTS outbox_effects (
    queue text NOT NULL, message_id text NOT NULL, redelivered boolean NOT NULL DEFAULT false)`);
  await pool.query('CREATE TABLE IF NOT EXISTS outbox_orders (id int PRIMARY KEY)');
  await adminConnect();
});

after(async () => {
  await admin?.close().catch(() => {});
  await pool.end();
});

// a new queue per test, and an empty outbox
async function freshQueue(name) {
  const queue = `outbox-test-${name}-${process.pid}`;
  await adminChannel.deleteQueue(queue);
  await adminChannel.assertQueue(queue, { durable: true });
  await pool.query('TRUNCATE idempotency_outbox');
  errors.length = 0;
  return queue;
}

async function stopAll() {
  while (running.length) await running.pop().stop();
}

function relay(options = {}) {
  const r = createRelay({ pool, url, idleDelayMs: 50, errorDelayMs: 200, onError: (e) => errors.push(e), ...options });
  running.push(r);
  return r;
}

function consumer(queue, options = {}) {
  const c = createConsumer({
    pool, url, queue, reconnectDelayMs: 200, onError: (e) => errors.push(e),
    handler: async ({ client, messageId, message }) => {
      await client.query('INSERT INTO outbox_effects (queue, message_id, redelivered) VALUES ($1, $2, $3)',
        [queue, messageId, message.fields.redelivered]);
    },
    ...options,
  });
  running.push(c);
  return c;
}

async function until(what, check, seconds = 180) {
  const end = Date.now() + seconds * 1000;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}; errors seen: ${errors.map(String).join('; ')}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const count = async (sql, params = []) => Number((await pool.query(sql, params)).rows[0].count);
const queued = async (queue) => (await adminChannel.checkQueue(queue)).messageCount;
const effects = (queue) => count('SELECT count(*) FROM outbox_effects WHERE queue = $1', [queue]);
const distinctEffects = (queue) => count('SELECT count(DISTINCT message_id) FROM outbox_effects WHERE queue = $1', [queue]);
const unsent = () => count("SELECT count(*) FROM idempotency_outbox WHERE status <> 'sent'");
// the extension's messaging counters (idempotency_stats, the library is
// preloaded in make test), zeroed at the start of the tests that check them
const resetCounters = () => pool.query('SELECT idem_stats_reset()');
async function counters() {
  const { rows } = await pool.query('SELECT outbox_enqueued, outbox_sent, inbox_duplicates FROM idempotency_stats');
  return Object.fromEntries(Object.entries(rows[0]).map(([k, v]) => [k, Number(v)]));
}

async function enqueue(queue, payload, { rollback = false } = {}) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    if (payload.order !== undefined) await client.query('INSERT INTO outbox_orders VALUES ($1)', [payload.order]);
    const { rows } = await client.query('SELECT idem_outbox_enqueue($1, $2) AS id', [queue, payload]);
    await client.query(rollback ? 'ROLLBACK' : 'COMMIT');
    return rows[0].id;
  } finally {
    client.release();
  }
}

// a child process (children.js) and the line it prints at its point
function child(role, queue, line) {
  const proc = spawn(process.execPath, [path.join(here, 'children.js'), role, queue],
    { env: process.env, stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  const reached = new Promise((resolve, reject) => {
    let out = '';
    proc.stdout.on('data', (d) => { out += d; if (out.includes(line)) resolve(); });
    proc.on('exit', (code) => reject(new Error(`${role} exited (${code}) before "${line}"`)));
  });
  return { proc, reached, exited };
}

test('messages of transactions that roll back are never published', async (t) => {
  t.after(stopAll);
  const queue = await freshQueue('rollback');
  for (let i = 0; i < 5; i++) await enqueue(queue, { i }, { rollback: true });
  const marker = await enqueue(queue, { marker: true });
  relay().start();
  await until('the committed message sent', () =>
    count("SELECT count(*) FROM idempotency_outbox WHERE message_id = $1 AND status = 'sent'", [marker]));
  assert.equal(await count('SELECT count(*) FROM idempotency_outbox'), 1, 'the outbox holds the committed message only');
  assert.equal(await queued(queue), 1, 'the broker got one message: the committed one');
  const msg = await adminChannel.get(queue, { noAck: true });
  assert.equal(msg.properties.messageId, marker, 'its message ID is the outbox\'s');
  assert.deepEqual(JSON.parse(msg.content), { marker: true });
});

test('a relay killed between the broker\'s confirm and its mark: published again, the effect happens once', async (t) => {
  t.after(stopAll);
  const queue = await freshQueue('relay-kill');
  await resetCounters();
  const id = await enqueue(queue, { n: 1 });
  const r = child('relay', queue, 'confirmed');
  await r.reached;
  r.proc.kill('SIGKILL');
  await r.exited;
  assert.equal(await queued(queue), 1, 'the broker confirmed the message once');
  const row = (await pool.query('SELECT status, attempts FROM idempotency_outbox WHERE message_id = $1', [id])).rows[0];
  assert.deepEqual(row, { status: 'pending', attempts: 1 }, 'not marked: still pending after one claim');
  // the killed relay's lease ends; another relay publishes it again
  await pool.query("UPDATE idempotency_outbox SET available_at = now() - interval '1 second' WHERE message_id = $1", [id]);
  relay().start();
  await until('the message marked sent', () =>
    count("SELECT count(*) FROM idempotency_outbox WHERE message_id = $1 AND status = 'sent'", [id]));
  assert.equal(await queued(queue), 2, 'published twice: once by each relay');
  const c = consumer(queue);
  await c.start();
  await until('both deliveries settled', async () => c.stats.handled + c.stats.duplicates === 2 && (await queued(queue)) === 0);
  assert.equal(await effects(queue), 1, 'one effect');
  assert.deepEqual({ ...c.stats }, { handled: 1, duplicates: 1, requeued: 0, rejected: 0 }, 'the second copy was acked as a duplicate');
  assert.deepEqual(await counters(), { outbox_enqueued: 1, outbox_sent: 1, inbox_duplicates: 1 },
    'idempotency_stats: one message, sent once (the killed relay never marked), one duplicate refused by the inbox');
});

test('a consumer killed in its handler: redelivered, the effect happens once', async (t) => {
  t.after(stopAll);
  const queue = await freshQueue('consumer-kill');
  const id = await enqueue(queue, { n: 1 });
  const { sent } = await relay().runOnce();
  assert.equal(sent, 1);
  const k = child('consumer', queue, 'in handler');
  await k.reached;
  k.proc.kill('SIGKILL');
  await k.exited;
  const c = consumer(queue);
  await c.start();
  await until('the redelivery handled', () => c.stats.handled === 1);
  const rows = (await pool.query('SELECT message_id, redelivered FROM outbox_effects WHERE queue = $1', [queue])).rows;
  assert.deepEqual(rows, [{ message_id: id, redelivered: true }], 'one effect, from the redelivery');
  await until('the queue empty (acked)', async () => (await queued(queue)) === 0);
});

test('a mark refused for a message another relay took over still marks the rest of the batch', async (t) => {
  t.after(stopAll);
  const queue = await freshQueue('takeover');
  const first = await enqueue(queue, { n: 1 });
  const second = await enqueue(queue, { n: 2 });
  let takenOverFence = null;
  // between the confirms and the mark, the first message's lease ends and
  // another relay claims it
  const racing = {
    async query(text, params) {
      if (text.includes('idem_outbox_mark_sent') && takenOverFence === null) {
        await pool.query("UPDATE idempotency_outbox SET available_at = now() - interval '1 second' WHERE message_id = $1", [first]);
        const { rows } = await pool.query("SELECT message_id, fence FROM idem_outbox_claim(10, '1 hour')");
        assert.deepEqual(rows.map((r) => r.message_id), [first], 'the other relay claims the first message only');
        takenOverFence = rows[0].fence;
      }
      return pool.query(text, params);
    },
  };
  const r = createRelay({ pool: racing, url, lease: '1 hour', onError: (e) => errors.push(e) });
  running.push(r);
  assert.deepEqual(await r.runOnce(), { claimed: 2, sent: 2, failed: 0 });
  const rows = (await pool.query('SELECT message_id, status, fence FROM idempotency_outbox ORDER BY created_at')).rows;
  assert.equal(rows[0].status, 'pending', 'the message taken over is left to its new owner');
  assert.equal(rows[0].fence, takenOverFence);
  assert.equal(rows[1].status, 'sent', 'the rest of the batch is marked');
  assert.equal(rows[1].message_id, second);
  assert.deepEqual(errors.map((e) => e.code), ['IK003'], 'the refusal reached onError');
});

test('the broker restarted in the middle of a stream: nothing lost, nothing doubled', { skip: !process.env.IDEM_TEST_RABBITMQ_DIR && 'IDEM_TEST_RABBITMQ_DIR not set' }, async (t) => {
  t.after(stopAll);
  const queue = await freshQueue('restart');
  const n = 60;
  relay({ retryAfter: '1 second', maxAttempts: 1000 }).start();
  const c = consumer(queue);
  await c.start();
  for (let i = 0; i < n / 3; i++) await enqueue(queue, { i });
  await until('some messages consumed', async () => (await effects(queue)) >= 5);
  const script = path.join(here, '../../../../scripts/rabbitmq.sh');
  const [dir, port] = [process.env.IDEM_TEST_RABBITMQ_DIR, process.env.IDEM_TEST_RABBITMQ_PORT];
  await admin.close().catch(() => {});
  execFileSync('bash', [script, 'stop', dir, port]);
  // producers go on while the broker is down: their messages wait in the outbox
  for (let i = n / 3; i < 2 * n / 3; i++) await enqueue(queue, { i });
  // a broker's shutdown is a graceful close (amqplib emits no 'error'):
  // the restart is met when the relay fails to reach it with messages to send
  await until('the relay to meet the stopped broker', async () => errors.length > 0);
  execFileSync('bash', [script, 'start', dir, port]);
  await adminConnect();
  for (let i = 2 * n / 3; i < n; i++) await enqueue(queue, { i });
  await until(`${n} effects`, async () => (await effects(queue)) >= n && (await unsent()) === 0);
  await until('the queue empty (acked)', async () => (await queued(queue)) === 0);
  assert.equal(await effects(queue), n, 'every message has its effect, once');
  assert.equal(await distinctEffects(queue), n);
  assert.ok(errors.length > 0, 'the relay and the consumer met the restart');
});

test('a storm: two relays, two consumers, N committed producer transactions give N effects', async (t) => {
  t.after(stopAll);
  const queue = await freshQueue('storm');
  await pool.query('TRUNCATE outbox_orders');
  await resetCounters();
  relay({ batchSize: 7 }).start();
  relay({ batchSize: 7 }).start();
  const consumers = [consumer(queue, { prefetch: 5 }), consumer(queue, { prefetch: 5 })];
  await Promise.all(consumers.map((c) => c.start()));
  const total = 200;
  let next = 0;
  const committed = [];
  await Promise.all(Array.from({ length: 8 }, async () => {
    while (next < total) {
      const order = next++;
      const rollback = order % 4 === 3;
      const id = await enqueue(queue, { order }, { rollback });
      if (!rollback) committed.push(id);
    }
  }));
  assert.equal(await count('SELECT count(*) FROM outbox_orders'), committed.length, 'the committed producer transactions');
  await until(`${committed.length} effects`, async () =>
    (await effects(queue)) >= committed.length && (await unsent()) === 0 && (await queued(queue)) === 0);
  assert.equal(await effects(queue), committed.length, 'N committed transactions, N effects');
  const rows = (await pool.query('SELECT message_id FROM outbox_effects WHERE queue = $1', [queue])).rows;
  assert.deepEqual(rows.map((r) => r.message_id).sort(), [...committed].sort(), 'each committed message once, no rolled-back one');
  assert.ok(consumers.every((c) => c.stats.handled > 0), 'both consumers worked');
  assert.deepEqual(await counters(), {
    outbox_enqueued: committed.length, outbox_sent: committed.length,
    inbox_duplicates: consumers.reduce((sum, c) => sum + c.stats.duplicates, 0),
  }, 'idempotency_stats: the committed messages enqueued and sent (no rolled-back one), the duplicates the consumers acked');
});
