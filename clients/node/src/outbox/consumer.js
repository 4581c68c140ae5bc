// The consumer wrapper (the inbox): for each delivery, claims its message
// ID with idem_once in a transaction of its own, runs the handler with that
// transaction's client, commits, and only then acks.  A delivery whose ID
// committed before (a redelivery, or a message the relay published twice)
// is acked without running the handler.  A handler that throws, or a
// database that fails, rolls back and the delivery is requeued; a consumer
// killed in the handler committed nothing, and the broker redelivers.
import { brokerChannel } from './connection.js';

const CLAIM = 'SELECT idem_once($1, scope => $2, ttl => $3::interval) AS first';

const defaults = {
  ttl: '7 days',              // must outlive the broker's longest redelivery window
  prefetch: 10,
  reconnectDelayMs: 1000,
  assertQueue: true,          // declare the queue durable before consuming
};

// pool: a pg Pool; url: the broker's URL; queue: the queue to consume;
// handler({ client, payload, messageId, message }): the effect, with the
// claim's pg client (never commit or roll back on it); scope: the inbox's
// namespace (default 'inbox:' + queue); onError(err): every error survived
export function createConsumer(options) {
  const o = { ...defaults, ...options };
  for (const name of ['pool', 'queue', 'handler']) {
    if (!o[name]) throw new TypeError(`createConsumer: ${name} is required`);
  }
  if (!o.url && !o.amqp) throw new TypeError('createConsumer: url is required');
  const scope = o.scope ?? `inbox:${o.queue}`;
  const onError = o.onError ?? (() => {});
  const stats = { handled: 0, duplicates: 0, requeued: 0, rejected: 0 };
  let running = false;
  let reconnectTimer = null;
  let inFlight = new Set();

  const broker = brokerChannel({
    amqp: o.amqp, url: o.url, onError,
    setup: async (channel) => {
      channel.on('close', () => scheduleReconnect());
      if (o.assertQueue) await channel.assertQueue(o.queue, { durable: true });
      await channel.prefetch(o.prefetch);
      await channel.consume(o.queue, (msg) => {
        if (msg === null) { scheduleReconnect(); return; }     // the queue was deleted
        const p = deliver(channel, msg).catch(onError).finally(() => inFlight.delete(p));
        inFlight.add(p);
      }, { noAck: false });
    },
  });

  function settle(channel, msg, how) {
    try {
      if (how === 'ack') channel.ack(msg);
      else channel.nack(msg, false, how === 'requeue');
    } catch (err) {
      onError(err);         // the channel closed: the broker redelivers, the inbox deduplicates
    }
  }

  async function deliver(channel, msg) {
    const messageId = msg.properties.messageId;
    let payload;
    try {
      if (typeof messageId !== 'string' || messageId === '') throw new Error('a delivery without a message ID cannot be deduplicated');
      payload = JSON.parse(msg.content.toString('utf8'));
    } catch (err) {
      stats.rejected++;
      settle(channel, msg, 'reject');         // to the dead-letter exchange, if the queue has one
      onError(err);
      return;
    }
    let client;
    try {
      client = await o.pool.connect();
    } catch (err) {
      stats.requeued++;
      settle(channel, msg, 'requeue');
      onError(err);
      return;
    }
    let broken;
    try {
      await client.query('BEGIN');
      const { rows } = await client.query(CLAIM, [messageId, scope, o.ttl]);
      if (!rows[0].first) {
        await client.query('ROLLBACK');
        stats.duplicates++;
        settle(channel, msg, 'ack');
        return;
      }
      await o.handler({ client, payload, messageId, message: msg });
      await client.query('COMMIT');
      stats.handled++;
      settle(channel, msg, 'ack');
    } catch (err) {
      try { await client.query('ROLLBACK'); } catch (rollbackErr) { broken = rollbackErr; }
      stats.requeued++;
      settle(channel, msg, 'requeue');
      onError(err);
    } finally {
      client.release(broken);
    }
  }

  function scheduleReconnect() {
    if (!running || reconnectTimer) return;
    reconnectTimer = setTimeout(async () => {
      reconnectTimer = null;
      if (!running) return;
      try {
        await broker.get();
      } catch (err) {
        onError(err);
        scheduleReconnect();
      }
    }, o.reconnectDelayMs);
  }

  return {
    stats,
    // resolves once consuming (rejects when the broker is unreachable)
    async start() {
      running = true;
      await broker.get();
      return this;
    },
    // stops consuming; deliveries in hand finish first
    async stop() {
      running = false;
      clearTimeout(reconnectTimer);
      reconnectTimer = null;
      await Promise.allSettled([...inFlight]);
      await broker.close();
    },
  };
}
