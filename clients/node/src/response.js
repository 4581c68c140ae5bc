// Responses as the middleware handles them: {status, headers, body} with
// lower-case header names and the body as a Buffer; how one is stored in
// the record's result (jsonb) and turned back into the same bytes; and the
// RFC 9457 problem answers.

// The stored form: {"status": 201, "headers": {...}, "body": "<text>"}, or
// "body_base64" for bytes that are not UTF-8 text jsonb can hold (jsonb
// would reorder keys of a JSON body, so the body is kept as a string).
export function encodeStored(response, storedHeaders) {
  const headers = {};
  for (const name of storedHeaders) {
    const value = response.headers[name];
    if (value !== undefined) headers[name] = Array.isArray(value) ? value.map(String) : String(value);
  }
  const stored = { status: response.status, headers };
  const text = response.body.toString('utf8');
  if (!text.includes('\u0000') && Buffer.from(text, 'utf8').equals(response.body)) stored.body = text;
  else stored.body_base64 = response.body.toString('base64');
  return stored;
}

export function decodeStored(result) {
  const headers = { ...(result.headers || {}), 'idempotent-replayed': 'true' };
  const body = result.body_base64 !== undefined
    ? Buffer.from(result.body_base64, 'base64') : Buffer.from(result.body ?? '', 'utf8');
  return { status: result.status ?? 200, headers, body };
}

export function problem(status, type, title, detail, headers = {}) {
  const body = Buffer.from(JSON.stringify({ type: `urn:idempotency:${type}`, title, status, detail }));
  return { status, headers: { 'content-type': 'application/problem+json', ...headers }, body, replaced: true };
}
