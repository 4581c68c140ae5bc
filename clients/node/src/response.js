// Responses as the middleware handles them: {status, headers, body} with
// lower-case header names and the body as a Buffer; how one is stored in
// the record's result (jsonb) and turned back into the same bytes; and the
// RFC 9457 problem answers.

// The stored form: {"status": 201, "headers": {...}, "body": "<text>"}, or
// "body_base64" for bytes that are not UTF-8 text jsonb can hold (jsonb
// would reorder keys of a JSON body, so the body is kept as a string).
// Here only the status and the allowed headers; the server builds the
// body from the bytes and chooses which of the two (statements.js).
export function storedForm(response, storedHeaders) {
  const headers = {};
  for (const name of storedHeaders) {
    const value = response.headers[name];
    if (value !== undefined) headers[name] = Array.isArray(value) ? value.map(String) : String(value);
  }
  return { status: response.status, headers };
}

// the response a replay answers with, from the stored form's status and
// headers and its body's bytes
export function decodeStored(result, body) {
  const headers = { ...(result.headers || {}), 'idempotent-replayed': 'true' };
  return { status: result.status ?? 200, headers, body };
}

// -> the bytes of a body given as text or base64 (one of them, else none)
export function bodyOf(text, base64) {
  return base64 != null ? Buffer.from(base64, 'base64') : Buffer.from(text ?? '', 'utf8');
}

const nextTurn = () => new Promise((resolve) => { setImmediate(resolve); });

// -> the bytes of a body read in parts (rows of hex and the total),
// a part per turn of the event loop; null when they are not all there
// (the record went between the claim and the read)
export async function bodyOfParts(rows) {
  if (rows.length === 0) return null;
  const body = Buffer.allocUnsafe(Number(rows[0].bytes));
  let written = 0;
  for (const { part } of rows) {
    await nextTurn();
    written += body.write(part, written, 'hex');
  }
  return written === body.length ? body : null;
}

// the response a local duplicate answers with, from the one committed
export function replayOf(response, storedHeaders) {
  const { status, headers } = storedForm(response, storedHeaders);
  return { status, headers: { ...headers, 'idempotent-replayed': 'true' }, body: response.body };
}

export function problem(status, type, title, detail, headers = {}) {
  const body = Buffer.from(JSON.stringify({ type: `urn:idempotency:${type}`, title, status, detail }));
  return { status, headers: { 'content-type': 'application/problem+json', ...headers }, body, replaced: true };
}
