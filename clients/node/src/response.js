// Responses as the middleware handles them: {status, headers, body} with
// lower-case header names and the body as a Buffer; how one is stored in
// the record's result (jsonb) and turned back into the same bytes; and the
// RFC 9457 problem answers.
import { isUtf8 } from 'node:buffer';

// The stored form: {"status": 201, "headers": {...}, "body": "<text>"}, or
// "body_base64" for bytes that are not UTF-8 text jsonb can hold (jsonb
// would reorder keys of a JSON body, so the body is kept as a string).
// Here only the status and the allowed headers; the server builds the
// body from the bytes (statements.js), isText says which of the two.
export function storedForm(response, storedHeaders) {
  const headers = {};
  for (const name of storedHeaders) {
    const value = response.headers[name];
    if (value !== undefined) headers[name] = Array.isArray(value) ? value.map(String) : String(value);
  }
  return { status: response.status, headers };
}

// A megabyte of a body is checked per turn of the event loop.
const SLICE = 1024 * 1024;
const nextTurn = () => new Promise((resolve) => { setImmediate(resolve); });

// -> whether body is UTF-8 text without NUL (stored as "body"), by native
// scans only, a slice per turn of the event loop, so that a large body
// never holds it long (on a loaded machine a scan of 20 MB took over
// 100 ms). A slice ends before a UTF-8 continuation byte, at a character
// boundary: valid text gives valid slices, and any invalid byte makes its
// slice invalid.
export async function isText(body) {
  for (let start = 0; start < body.length;) {
    let end = Math.min(start + SLICE, body.length);
    for (let back = 0; back < 3 && end < body.length && (body[end] & 0xc0) === 0x80; back += 1) end -= 1;
    const slice = body.subarray(start, end);
    if (slice.indexOf(0) !== -1 || !isUtf8(slice)) return false;
    start = end;
    if (start < body.length) await nextTurn();
  }
  return true;
}

// the response a replay answers with, from the stored form
export function decodeStored(result) {
  const headers = { ...(result.headers || {}), 'idempotent-replayed': 'true' };
  const body = result.body_base64 !== undefined
    ? Buffer.from(result.body_base64, 'base64') : Buffer.from(result.body ?? '', 'utf8');
  return { status: result.status ?? 200, headers, body };
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
