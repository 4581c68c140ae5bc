// The ORM test application as a process of its own, for the tests that kill
// it or run two of it: node test/orm/server.js DSN [OPTIONS_JSON [hold]]
// -> prints its URL, serves until killed. With "hold", a request whose key
// starts with "held-" is held after its handler answered, before its outcome's round trip
// (idem_finish and COMMIT) is sent: the process prints "held KEY" and the
// test kills it there.
import { listen } from './app.js';

const holdAtCommit = (pool) => pool.on('connect', (client) => {
  const query = client.query;
  client.query = function heldQuery(config, ...rest) {
    const steps = config && typeof config.submit === 'function' ? config.steps ?? [] : [];
    const key = steps.some((s) => s.text === 'COMMIT') ? String(steps[0].values[0]) : '';
    if (key.startsWith('held-')) {
      console.log(`held ${key}`);
      return undefined; // never sent: the test kills the process
    }
    return query.call(this, config, ...rest);
  };
});

const app = await listen(process.argv[2], {
  options: JSON.parse(process.argv[3] ?? '{}'),
  onPool: process.argv[4] === 'hold' ? holdAtCommit : undefined,
});
console.log(app.url);
