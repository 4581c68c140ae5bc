// The test application as a process of its own, for the tests that kill it
// or storm two of them: node test/server.js DSN [FRAMEWORK] -> prints its
// URL, serves until killed (FRAMEWORK as in app.js, express5 by default).
// The outcome of a key containing "at-commit" waits, after its handler
// answered and before idem_finish and COMMIT are sent, for the advisory
// lock COMMIT_GATE the test holds (on a connection of its own).
import pg from 'pg';
import { COMMIT_GATE, listen } from './app.js';

const [dsn, framework = 'express5'] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: dsn, max: 10 });

// the gate's connection is direct (the suite's IDEM_TEST_DSN): through
// PgBouncer it would take one of the server connections the others need
async function atCommitGate() {
  const c = new pg.Client(process.env.IDEM_TEST_DSN ?? dsn);
  await c.connect();
  try {
    await c.query('SELECT pg_advisory_xact_lock_shared($1)', [COMMIT_GATE]);
  } finally {
    await c.end();
  }
}

// pool.connect() as the package calls it, with the gate before the outcome
const gated = {
  connect: async () => {
    const client = await pool.connect();
    const { query, release } = client;
    client.query = async function gatedQuery(config, ...rest) {
      const finish = config && config.steps && config.steps.find((s) => s.text.includes('idem_finish'));
      if (finish && String(finish.values[0]).includes('at-commit')) await atCommitGate();
      return query.call(this, config, ...rest);
    };
    client.release = (err) => {
      delete client.query;
      delete client.release;
      release.call(client, err);
    };
    return client;
  },
};

const app = await listen(framework, { pool: gated });
console.log(app.url);
