// Several statements with parameters in one round trip: Parse, Bind and
// Execute for each, then one Sync (the extended protocol's pipelining),
// handed to client.query as a node-postgres "submittable". Values travel
// as parameters, never escaped into SQL text: strings as text, Buffers as
// binary. No Describe: a step's result columns are known (its "columns"),
// so the server sends no row description and rows come back as objects of
// those names with the raw text values (the caller parses the few it
// reads), which an application's type parsers do not change.

// statements of each connection parsed under a name (the "prepare"
// option), and those a failed round trip may or may not have left
const parsed = new WeakMap();

// A Buffer value from this size on goes to the socket as it is, after the
// bytes of its Bind message before it: pg-protocol's writer would first
// copy it into the message, a second copy of a large response on the
// event loop (besides the memory).
const WRITTEN_AS_IS = 64 * 1024;

const int16 = (n) => { const b = Buffer.allocUnsafe(2); b.writeInt16BE(n); return b; };
const int32 = (n) => { const b = Buffer.allocUnsafe(4); b.writeInt32BE(n); return b; };

// -> the Bind message of the unnamed portal, as Buffers to write in order:
// strings as text, Buffers as binary, null as NULL, the results as text
function bindMessage(statement, values) {
  const chunks = [];
  let head = [Buffer.from([0x42, 0, 0, 0, 0, 0]), Buffer.from(`${statement}\0`), int16(values.length)];
  for (const v of values) head.push(int16(Buffer.isBuffer(v) ? 1 : 0));
  head.push(int16(values.length));
  for (const v of values) {
    if (v === null || v === undefined) {
      head.push(int32(-1));
      continue;
    }
    const bytes = Buffer.isBuffer(v) ? v : Buffer.from(String(v));
    head.push(int32(bytes.length));
    if (bytes.length < WRITTEN_AS_IS) {
      head.push(bytes);
    } else {
      chunks.push(Buffer.concat(head), bytes);
      head = [];
    }
  }
  head.push(int16(1), int16(0));
  chunks.push(Buffer.concat(head));
  const length = chunks.reduce((sum, chunk) => sum + chunk.length, 0) - 1;
  chunks[0].writeInt32BE(length, 1);
  return chunks;
}

const large = (v) => Buffer.isBuffer(v) && v.length >= WRITTEN_AS_IS;

function bind(connection, statement, values) {
  if (!values.some(large)) {
    connection.bind({ statement, values, binary: false });
  } else if (connection.stream.writable) {
    for (const chunk of bindMessage(statement, values)) connection.stream.write(chunk);
  }
}

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
    this.steps = steps; // [{text, values?, name?, columns?}]
    this.results = [];
    this.rows = null;
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
        bind(connection, name, values);
        connection.execute({ portal: '', rows: 0 });
      }
      connection.sync();
    } finally {
      if (connection.stream.uncork) connection.stream.uncork();
    }
    return null;
  }

  // (not sent: no Describe)
  handleRowDescription() {}

  handleDataRow(msg) {
    // the step whose rows these are: the one after those complete
    const columns = this.steps[this.results.length].columns ?? [];
    const row = {};
    for (let i = 0; i < columns.length; i += 1) row[columns[i]] = msg.fields[i];
    if (!this.rows) this.rows = [];
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
