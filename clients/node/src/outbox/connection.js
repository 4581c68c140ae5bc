// One AMQP connection and channel, made on first use and made again after
// the broker or the network dropped them.  amqplib is loaded here, on
// first use, so that the HTTP middleware never needs it.

// amqp: the amqplib module, or null to import it; url: the broker's URL;
// confirm: a confirm channel (publisher confirms); setup(channel): run on
// each new channel (declarations, prefetch, consume); onError(err).
export function brokerChannel({ amqp = null, url, confirm = false, setup = async () => {}, onError }) {
  let opening = null;
  let connection = null;
  let closed = false;

  async function open() {
    const lib = amqp ?? (await import('amqplib')).default;
    const conn = await lib.connect(url);
    // an 'error' without a listener would crash the application's process
    conn.on('error', (err) => onError(err));
    conn.on('close', () => {
      if (connection === conn) connection = null;
      opening = null;
    });
    try {
      const channel = confirm ? await conn.createConfirmChannel() : await conn.createChannel();
      channel.on('error', (err) => onError(err));
      channel.on('close', () => {
        opening = null;
        // a channel closed by the broker (a failed declaration) leaves the
        // connection open: close it too, so the next use starts afresh
        conn.close().catch(() => {});
      });
      await setup(channel);
      connection = conn;
      return channel;
    } catch (err) {
      conn.close().catch(() => {});
      throw err;
    }
  }

  return {
    // the open channel, or a new one (rejects when the broker is unreachable)
    get() {
      if (closed) return Promise.reject(new Error('the broker connection was closed by the application'));
      if (!opening) {
        opening = open();
        opening.catch(() => { opening = null; });
      }
      return opening;
    },
    get connected() { return connection !== null; },
    async close() {
      closed = true;
      const conn = connection;
      connection = null;
      opening = null;
      if (conn) await conn.close().catch(() => {});
    },
  };
}
