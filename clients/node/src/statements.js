// The SQL of the claim and of idem_finish, as simple-protocol text with
// escaped literals, so that BEGIN travels with the claim and COMMIT with
// idem_finish in one round trip each (node-postgres sends a parameterized
// query as a round trip of its own).  With the "prepare" option, both are
// server-side prepared statements (SQL PREPARE, sent before the first claim
// on each connection), saving their parse and plan on every request; a
// transaction-pooling PgBouncer cannot keep those, so it is off by default.
import { createHash } from 'node:crypto';

const CLAIM_COLUMNS = 'outcome, result, fence, recovery_point, extract(epoch FROM retry_after)::float8 AS retry_after';
const PREPARE = 'PREPARE pg_idempotency_key_claim(text, text, jsonb, bytea, float8, float8) AS'
  + ` SELECT ${CLAIM_COLUMNS} FROM idem_claim($1, scope => $2,`
  + ' fingerprint => CASE WHEN $3 IS NULL THEN $4 ELSE idem_fingerprint($3) END, wait => false,'
  + ' ttl => make_interval(secs => $5), lease => make_interval(secs => $6));'
  + ' PREPARE pg_idempotency_key_finish(text, jsonb, text, bigint) AS'
  + ' SELECT idem_finish($1, $2, scope => $3, fence => $4)';
const prepared = new WeakSet();

export const literal = (client) => (v) => (v === null || v === undefined ? 'NULL' : client.escapeLiteral(String(v)));
const secondsOf = (ms) => (ms == null ? 'NULL' : String(Number(ms) / 1000));

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
  return { json: null, hash: `\\x${createHash('sha256').update(`${method} ${path}\n`).update(bytes).digest('hex')}` };
}

// -> {setup, sql}: setup (the PREPAREs, once per connection) or null, and
// the claim of request = {key, scope, fingerprint} with o's ttl and lease.
export function claimSql(client, o, request) {
  const lit = literal(client);
  const { json, hash } = request.fingerprint;
  if (o.prepare) {
    return {
      setup: prepared.has(client) ? null : PREPARE,
      sql: `EXECUTE pg_idempotency_key_claim(${lit(request.key)}, ${lit(request.scope)}, ${lit(json)},`
        + ` ${lit(hash)}, ${secondsOf(o.ttl)}, ${secondsOf(o.lease)})`,
    };
  }
  const fingerprint = json !== null ? `idem_fingerprint(${lit(json)}::jsonb)` : `${lit(hash)}::bytea`;
  return {
    setup: null,
    sql: `SELECT ${CLAIM_COLUMNS} FROM idem_claim(${lit(request.key)}, scope => ${lit(request.scope)},`
      + ` fingerprint => ${fingerprint}, wait => false`
      + `${o.ttl != null ? `, ttl => make_interval(secs => ${secondsOf(o.ttl)})` : ''}`
      + `${o.lease != null ? `, lease => make_interval(secs => ${secondsOf(o.lease)})` : ''})`,
  };
}

export const markPrepared = (client) => prepared.add(client);
// a connection that lost them (26000): prepared again with its next claim
export const forgetPrepared = (client) => prepared.delete(client);

// idem_finish of key with the stored result (an object), fence or null
export function finishSql(client, key, scope, stored, fence) {
  const lit = literal(client);
  const args = [lit(key), `${lit(JSON.stringify(stored))}`, lit(scope), fence ?? 'NULL'];
  if (prepared.has(client)) return `EXECUTE pg_idempotency_key_finish(${args.join(', ')})`;
  return `SELECT idem_finish(${args[0]}, ${args[1]}::jsonb, scope => ${args[2]}, fence => ${args[3]})`;
}
