// Responses as the middleware handles them: {status, headers, body} with
// lower-case header names and the body as a Buffer; how one is stored in
// the record's result (jsonb) and turned back into the same bytes; and the
// RFC 9457 problem answers.
import { isUtf8 } from 'node:buffer';

// The stored form: {"status": 201, "headers": {...}, "body": "<text>"}, or
// "body_base64" for bytes that are not UTF-8 text jsonb can hold (jsonb
// would reorder keys of a JSON body, so the body is kept as a string).
// Here only the status, the allowed headers and which of the two; the
// server builds the body from the bytes (statements.js). Native checks
// only: no per-character JavaScript on a large body.
export function storedForm(response, storedHeaders) {
  const headers = {};
  for (const name of storedHeaders) {
    const value = response.headers[name];
    if (value !== undefined) headers[name] = Array.isArray(value) ? value.map(String) : String(value);
  }
  const text = response.body.indexOf(0) === -1 && isUtf8(response.body);
  return { status: response.status, headers, text };
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
  const { status, headers } = storedForm({ ...response, body: Buffer.alloc(0) }, storedHeaders);
  return { status, headers: { ...headers, 'idempotent-replayed': 'true' }, body: response.body };
}

export function problem(status, type, title, detail, headers = {}) {
  const body = Buffer.from(JSON.stringify({ type: `urn:idempotency:${type}`, title, status, detail }));
  return { status, headers: { 'content-type': 'application/problem+json', ...headers }, body, replaced: true };
}
