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

// A megabyte of a large replay's body is decoded per turn of the event
// loop, after a turn of its own: the driver has just decoded the whole
// row, and a 20 MB body decoded at once held the loop for tens of ms more.
const SLICE = 1024 * 1024;
const nextTurn = () => new Promise((resolve) => { setImmediate(resolve); });

// -> the bytes of a body given as base64 (else as text), written in
// slices into one buffer
async function bodyBytes(text, base64) {
  const source = base64 ?? text ?? '';
  const encoding = base64 != null ? 'base64' : 'utf8';
  if (source.length <= SLICE) return Buffer.from(source, encoding);
  const bytes = Buffer.allocUnsafe(Buffer.byteLength(source, encoding));
  let written = 0;
  for (let start = 0; start < source.length;) {
    await nextTurn();
    let end = Math.min(start + SLICE, source.length);
    // a slice ends between characters: not inside a surrogate pair
    // (text), at a multiple of 4 characters (base64; SLICE is one)
    const code = source.charCodeAt(end - 1);
    if (end < source.length && code >= 0xd800 && code <= 0xdbff) end -= 1;
    written += bytes.write(source.slice(start, end), written, encoding);
    start = end;
  }
  return bytes.subarray(0, written);
}

// the response a replay answers with, from the stored form's status and
// headers and its body, as text or base64 (one of them, else none)
export async function decodeStored(result, body, bodyBase64) {
  const headers = { ...(result.headers || {}), 'idempotent-replayed': 'true' };
  return { status: result.status ?? 200, headers, body: await bodyBytes(body, bodyBase64) };
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
