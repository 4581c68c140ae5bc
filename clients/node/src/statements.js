// The statements of the claim and of the outcome, with parameters: BEGIN
// travels with the claim and COMMIT with idem_finish_response, one round
// trip each (pipeline.js). No value is escaped into SQL text: the request
// body's fingerprint input and the response body go as parameters, the body
// as binary bytes that idem_finish_response turns into the stored form. With
// the "prepare" option both statements are parsed once per connection under
// a name (BEGIN and COMMIT too); a transaction-pooling PgBouncer cannot keep
// those, so it is off by default.
import { createHash } from 'node:crypto';
import { storedForm } from './response.js';

// A replay's body comes in a column of its own (no JSON.parse of a large
// text), cut after BODY_PART characters: a longer one (inParts) is read
// with BODY_PARTS, a row per BODY_PART bytes, so that the driver never
// decodes one large row on the event loop. (left() costs a new key next
// to nothing; a CASE on the body's length cost 4% of the transaction.)
const BODY_PART = 1024 * 1024;
const CLAIM = 'SELECT outcome, result - \'body\' - \'body_base64\' AS result,'
  + ` left(result ->> 'body', ${BODY_PART + 1}) AS body,`
  + ` left(result ->> 'body_base64', ${BODY_PART + 1}) AS body_base64,`
  + ' fence, recovery_point, extract(epoch FROM retry_after)::float8 AS retry_after'
  + ' FROM idem_claim($1::text, scope => $2::text,'
  + ' fingerprint => CASE WHEN $3::jsonb IS NULL THEN $4::bytea ELSE idem_fingerprint($3::jsonb) END,'
  + ' wait => false, ttl => make_interval(secs => $5::float8), lease => make_interval(secs => $6::float8))';

// -> whether a replay's body (the claim's row) must be read in parts: it
// may have been cut (its UTF-16 length counts a character at least once)
export const inParts = (row) => (row.body ?? row.body_base64 ?? '').length > BODY_PART;

// the body's bytes in parts (hex, whatever the session's bytea_output),
// with their total, from the stored form; no row when the record is gone
const BODY_PARTS = 'SELECT encode(substr(x.b, p, $3::int), \'hex\') AS part, octet_length(x.b) AS bytes'
  + ' FROM (SELECT CASE WHEN result ? \'body_base64\' THEN decode(result ->> \'body_base64\', \'base64\')'
  + ' ELSE convert_to(result ->> \'body\', \'UTF8\') END AS b FROM idem_lookup($1::text, $2::text) OFFSET 0) x,'
  + ' generate_series(1, octet_length(x.b), $3::int) p ORDER BY p';

// the stored form {"status", "headers", "body" | "body_base64"}, built by
// the server from the body's bytes
const FINISH = 'SELECT idem_finish_response($1::text, $2::int, $3::jsonb, $4::bytea, scope => $5::text, fence => $6::bigint)';

const secondsOf = (ms) => (ms == null ? null : String(Number(ms) / 1000));
const named = (o, name) => (o.prepare ? name : '');

// The fingerprint: {json} of method, path and a parsed JSON body, hashed by
// idem_fingerprint (key order and white space do not count), else {hash},
// SHA-256 of method, path and the body's bytes.
export function fingerprintOf(method, path, body) {
  if (body !== undefined && body !== null && !Buffer.isBuffer(body) && typeof body === 'object') {
    const json = JSON.stringify([method, path, body]);
    // jsonb refuses \u0000: such a body is hashed as bytes
    if (!json.includes('\\u0000')) return { json, hash: null };
  }
  const bytes = Buffer.isBuffer(body) ? body
    : Buffer.from(typeof body === 'string' ? body : body == null ? '' : JSON.stringify(body));
  return { json: null, hash: createHash('sha256').update(`${method} ${path}\n`).update(bytes).digest() };
}

const CLAIM_COLUMNS = ['outcome', 'result', 'body', 'body_base64', 'fence', 'recovery_point', 'retry_after'];

// the claim of key and scope with fingerprint and o's ttl and lease
export function claimStep(o, key, scope, fingerprint) {
  return {
    text: CLAIM,
    name: named(o, 'pg_idempotency_key_claim'),
    values: [key, scope, fingerprint.json, fingerprint.hash, secondsOf(o.ttl), secondsOf(o.lease)],
    columns: CLAIM_COLUMNS,
  };
}

// the parts of the body of key's stored response (BODY_PARTS)
export function bodyPartsStep(key, scope) {
  return { text: BODY_PARTS, values: [key, scope, String(BODY_PART)], columns: ['part', 'bytes'] };
}

// idem_finish_response of key with response {status, headers, body},
// fence or null
export function finishStep(o, key, scope, response, fence) {
  const { status, headers } = storedForm(response, o.storedHeaders);
  return {
    text: FINISH,
    name: named(o, 'pg_idempotency_key_finish'),
    values: [key, String(status), JSON.stringify(headers), response.body, scope,
      fence == null ? null : String(fence)],
  };
}

const BEGIN = { text: 'BEGIN' };
const COMMIT = { text: 'COMMIT' };
const BEGIN_NAMED = { text: 'BEGIN', name: 'pg_idempotency_key_begin' };
const COMMIT_NAMED = { text: 'COMMIT', name: 'pg_idempotency_key_commit' };
export const beginStep = (o) => (o.prepare ? BEGIN_NAMED : BEGIN);
export const commitStep = (o) => (o.prepare ? COMMIT_NAMED : COMMIT);
