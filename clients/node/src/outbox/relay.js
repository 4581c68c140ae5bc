// The outbox relay: claims batches of the outbox (idem_outbox_claim, in
// autocommit), publishes each message with publisher confirms, and marks
// the confirmed ones sent with the claim's fence; messages the broker
// refused or returned, or whose confirm did not come, are marked failed
// (retried after retryAfter, dead after maxAttempts claims).  A relay
// killed at any point loses nothing: its claim's lease ends and another
// relay publishes the messages again (the consumer's inbox deduplicates).
import { brokerChannel } from './connection.js';

const CLAIM = `SELECT message_id, destination, payload, headers, fence
                 FROM idem_outbox_claim($1, $2::interval)`;
const MARK_SENT = 'SELECT idem_outbox_mark_sent($1::uuid[], $2) AS marked';
const MARK_FAILED = 'SELECT idem_outbox_mark_failed($1, $2, $3, $4::interval, $5) AS status';

const defaults = {
  exchange: '',               // '': the default exchange, destination = queue name
  batchSize: 100,
  lease: '1 minute',          // longer than publishing and confirming one batch
  retryAfter: '10 seconds',
  maxAttempts: 10,
  idleDelayMs: 500,           // pause after an empty claim
  errorDelayMs: 1000,         // pause after a failed batch (database or broker down)
  confirmTimeoutMs: 30000,    // a confirm that takes longer counts as a failure
};

// pool: a pg Pool (each claim and mark is a statement of its own);
// url: the broker's URL; onError(err): every error the loop survived
export function createRelay(options) {
  const o = { ...defaults, ...options };
  if (!o.pool) throw new TypeError('createRelay: pool is required');
  if (!o.url && !o.amqp) throw new TypeError('createRelay: url is required');
  const onError = o.onError ?? (() => {});
  const returned = new Set();
  const broker = brokerChannel({
    amqp: o.amqp, url: o.url, confirm: true, onError,
    setup: async (channel) => {
      // a mandatory message no queue took comes back before its confirm
      channel.on('return', (msg) => returned.add(msg.properties.messageId));
    },
  });
  let running = false;
  let loop = null;
  let wake = null;

  function publish(channel, row) {
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(new Error('no publisher confirm in time')), o.confirmTimeoutMs);
      const done = (err) => { clearTimeout(timer); resolve(err ?? null); };
      try {
        channel.publish(o.exchange, row.destination, Buffer.from(JSON.stringify(row.payload)), {
          messageId: row.message_id, persistent: true, mandatory: true,
          contentType: 'application/json', headers: row.headers,
        }, (err) => done(err ? new Error(`nacked by the broker: ${err.message ?? err}`)
          : returned.delete(row.message_id) ? new Error(`no queue is bound to "${row.destination}"`) : null));
      } catch (err) {
        done(err);
      }
    });
  }

  async function markFailed(row, err) {
    try {
      await o.pool.query(MARK_FAILED, [row.message_id, row.fence, String(err.message ?? err), o.retryAfter, o.maxAttempts]);
    } catch (markErr) {
      onError(markErr);     // IK003: taken over; else the lease ends and it is claimed again
    }
  }

  // All or none is refused (IK003) when another relay took any of the
  // messages over after the lease ended: the others are still this
  // claim's, marked one by one, so that they are not published again
  async function markSent(ids, fence) {
    try {
      await o.pool.query(MARK_SENT, [ids, fence]);
    } catch (err) {
      if (err.code !== 'IK003' || ids.length === 1) throw err;
      for (const id of ids) {
        try {
          await o.pool.query(MARK_SENT, [[id], fence]);
        } catch (oneErr) {
          if (oneErr.code !== 'IK003') throw oneErr;
          onError(oneErr);
        }
      }
    }
  }

  // One claim, publish and mark; returns the counts
  async function runOnce() {
    const { rows } = await o.pool.query(CLAIM, [o.batchSize, o.lease]);
    if (rows.length === 0) return { claimed: 0, sent: 0, failed: 0 };
    const fence = rows[0].fence;
    let outcomes;
    try {
      const channel = await broker.get();
      outcomes = await Promise.all(rows.map((row) => publish(channel, row)));
    } catch (err) {
      outcomes = rows.map(() => err);
    }
    const sent = rows.filter((_, i) => outcomes[i] === null).map((row) => row.message_id);
    if (sent.length > 0) await markSent(sent, fence);
    const failed = rows.filter((_, i) => outcomes[i] !== null);
    for (let i = 0; i < rows.length; i++) if (outcomes[i] !== null) await markFailed(rows[i], outcomes[i]);
    if (failed.length > 0) onError(outcomes.find((e) => e !== null));
    return { claimed: rows.length, sent: sent.length, failed: failed.length };
  }

  function pause(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      wake = () => { clearTimeout(timer); resolve(); };
    });
  }

  async function run() {
    while (running) {
      let delay = 0;
      try {
        const r = await runOnce();
        if (r.claimed === 0) delay = o.idleDelayMs;
        else if (r.failed > 0) delay = o.errorDelayMs;
      } catch (err) {
        onError(err);
        delay = o.errorDelayMs;
      }
      if (running && delay > 0) await pause(delay);
    }
  }

  return {
    runOnce,
    start() {
      if (!running) { running = true; loop = run(); }
      return this;
    },
    // ends the loop after the batch in hand, then closes the broker connection
    async stop() {
      running = false;
      wake?.();
      await loop;
      await broker.close();
    },
  };
}
