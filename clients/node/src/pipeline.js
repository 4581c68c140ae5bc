// Several statements with parameters in one round trip: Parse, Bind,
// Describe and Execute for each, then one Sync (the extended protocol's
// pipelining), handed to client.query as a node-postgres "submittable".
// Values travel as parameters, never escaped into SQL text: strings as
// text, Buffers as binary. Rows come back as objects of the raw text
// values (the caller parses the few columns it knows), so an
// application's type parsers do not change them.

// statements of each connection parsed under a name (the "prepare"
// option), and those a failed round trip may or may not have left
const parsed = new WeakMap();

function namesOf(connection) {
  let names = parsed.get(connection);
  if (!names) {
    names = { sure: new Set(), unsure: new Set() };
    parsed.set(connection, names);
  }
  return names;
}

class Pipeline {
  constructor(steps) {
    this.steps = steps; // [{text, values, name?}]
    this.results = [];
    this.rows = null;
    this.fields = null;
    this.callback = null;
    this.connection = null;
  }

  submit(connection) {
    this.connection = connection;
    const names = namesOf(connection);
    if (connection.stream.cork) connection.stream.cork();
    try {
      for (const { text, values = [], name = '' } of this.steps) {
        if (!name || !names.sure.has(name)) {
          // closing a statement that does not exist is no error
          if (name && names.unsure.has(name)) connection.close({ type: 'S', name });
          connection.parse({ text, name, types: [] });
          if (name) names.unsure.add(name);
        }
        connection.bind({ statement: name, values, binary: false });
        connection.describe({ type: 'P', name: '' });
        connection.execute({ portal: '', rows: 0 });
      }
      connection.sync();
    } finally {
      if (connection.stream.uncork) connection.stream.uncork();
    }
    return null;
  }

  handleRowDescription(msg) {
    this.fields = msg.fields.map((f) => f.name);
    this.rows = [];
  }

  handleDataRow(msg) {
    const row = {};
    this.fields.forEach((name, i) => { row[name] = msg.fields[i]; });
    this.rows.push(row);
  }

  handleCommandComplete() {
    this.results.push(this.rows ?? []);
    this.rows = null;
  }

  handleEmptyQuery() {
    this.results.push([]);
  }

  handlePortalSuspended() {}

  handleCopyInResponse(connection) {
    connection.sendCopyFail('no COPY here');
  }

  handleCopyData() {}

  handleError(err) {
    this.finish(err);
  }

  handleReadyForQuery() {
    // every statement ran: the named ones exist
    const names = namesOf(this.connection);
    for (const { name } of this.steps) {
      if (name) {
        names.sure.add(name);
        names.unsure.delete(name);
      }
    }
    this.finish(null, this.results);
  }

  finish(err, results) {
    const callback = this.callback;
    this.callback = null;
    if (callback) callback(err, results);
  }
}

// -> the rows of each step, in order
export function pipeline(client, steps) {
  return new Promise((resolve, reject) => {
    const p = new Pipeline(steps);
    p.callback = (err, results) => (err ? reject(err) : resolve(results));
    client.query(p);
  });
}

// a connection that lost its statements (26000): parsed again next time
export function forgetStatements(client) {
  const names = client.connection && parsed.get(client.connection);
  if (names) for (const name of names.sure) { names.sure.delete(name); names.unsure.add(name); }
}
