-- Bad input: every public function with NULL in each argument, odd keys
-- and scopes, bad intervals, wrong fences and bad settings.  Each call runs
-- through pg_temp.try (sql/include/try.sql), in a subtransaction rolled
-- back afterwards, and prints its SQLSTATE and message, or "ok" and what it
-- returned: a call wrongly accepted shows as "ok".  Huge values (10 MB)
-- are in test/t/015_huge_values.pl, on a cluster of their own.
\set VERBOSITY terse
TRUNCATE idempotent_record;
TRUNCATE idempotency_token;
\i sql/include/try.sql

-- the records the calls meet: a finished record, a final failure, a live
-- leased claim (fence 3, after two takeovers), an unknown outcome, a token
BEGIN;
SELECT outcome FROM idem_claim('done', fingerprint => idem_fingerprint('{"a": 1}'));
SELECT idem_finish('done', '{"r": 1}');
SELECT outcome FROM idem_claim('declined');
SELECT idem_fail('declined', '{"e": 1}', retryable => false);
COMMIT;
SELECT outcome FROM idem_claim('leased', lease => '1 hour');
UPDATE idempotent_record SET fence = 3 WHERE key = 'leased';
SELECT outcome FROM idem_claim('unsure', lease => '1 hour');
SELECT idem_mark_unknown('unsure', '{"why": "timeout"}', fence => 1);
SELECT length(idem_token_issue('form')) AS token_length;
CREATE TABLE bim_orders (id int PRIMARY KEY, status text NOT NULL);
INSERT INTO bim_orders VALUES (1, 'pending');

-------------------------------------------------------------------------------
-- NULL in each argument.  Required arguments: 22004.  Optional ones
-- (fingerprint, ttl, lease, fence, status_column's default aside) mean
-- "none" or "the default", as the README says.
-------------------------------------------------------------------------------
SELECT fn, arg, pg_temp.try(sql) AS answer FROM (SELECT * FROM (VALUES
 (1, 'idem_claim', 'key', $$SELECT outcome FROM idem_claim(NULL)$$),
 (2, 'idem_claim', 'scope', $$SELECT outcome FROM idem_claim('k', scope => NULL)$$),
 (3, 'idem_claim', 'fingerprint (no check)', $$SELECT outcome FROM idem_claim('done', fingerprint => NULL)$$),
 (4, 'idem_claim', 'ttl (the default)', $$SELECT outcome FROM idem_claim('k', ttl => NULL)$$),
 (5, 'idem_claim', 'wait', $$SELECT outcome FROM idem_claim('k', wait => NULL)$$),
 (6, 'idem_claim', 'lease (in-transaction)', $$SELECT outcome || ' ' || (locked_until IS NULL) FROM idem_claim('k', lease => NULL), idempotent_record WHERE key = 'k'$$),
 (7, 'idem_claim', 'every argument (the key is named)', $$SELECT outcome FROM idem_claim(NULL, scope => NULL, fingerprint => NULL, ttl => NULL, wait => NULL)$$),
 (29, 'idem_lookup', 'key', $$SELECT count(*) FROM idem_lookup(NULL)$$),
 (30, 'idem_lookup', 'scope', $$SELECT count(*) FROM idem_lookup('done', NULL)$$),
 (31, 'idem_fingerprint', 'body', $$SELECT idem_fingerprint(NULL)$$),
 (32, 'idem_fingerprint', 'body = JSON null (a value)', $$SELECT length(idem_fingerprint('null'))$$),
 (33, 'idem_once', 'key', $$SELECT idem_once(NULL)$$),
 (34, 'idem_once', 'scope', $$SELECT idem_once('m', scope => NULL)$$),
 (35, 'idem_once', 'ttl (the default)', $$SELECT idem_once('m', ttl => NULL)$$),
 (36, 'idem_purge', 'batch_size', $$SELECT idem_purge(NULL)$$),
 (37, 'idem_token_issue', 'scope', $$SELECT idem_token_issue(NULL)$$),
 (38, 'idem_token_issue', 'ttl', $$SELECT idem_token_issue('form', NULL)$$),
 (39, 'idem_token_consume', 'token', $$SELECT idem_token_consume(NULL, 'form')$$),
 (40, 'idem_token_consume', 'scope', $$SELECT idem_token_consume('t', NULL)$$),
 (41, 'idem_transition', 'rel', $$SELECT idem_transition(NULL, 1, 'paid', ARRAY['pending'])$$),
 (42, 'idem_transition', 'id', $$SELECT idem_transition('bim_orders', NULL::int, 'paid', ARRAY['pending'])$$),
 (43, 'idem_transition', 'to_state', $$SELECT idem_transition('bim_orders', 1, NULL, ARRAY['pending'])$$),
 (44, 'idem_transition', 'from_states', $$SELECT idem_transition('bim_orders', 1, 'paid', NULL)$$),
 (45, 'idem_transition', 'from_states element', $$SELECT idem_transition('bim_orders', 1, 'paid', ARRAY['pending', NULL])$$),
 (46, 'idem_transition', 'status_column', $$SELECT idem_transition('bim_orders', 1, 'paid', ARRAY['pending'], NULL)$$),
 (47, 'idem_transition_guard', 'called directly', $$SELECT idem_transition_guard()$$),
 (48, 'idem_version_guard', 'called directly', $$SELECT idem_version_guard()$$),
 (49, 'idem_shard_probe', 'shard', $$SELECT idem_shard_probe(NULL, '', 'k')$$),
 (50, 'idem_shard_probe', 'scope', $$SELECT idem_shard_probe(1, NULL, 'k')$$),
 (51, 'idem_shard_probe', 'key', $$SELECT idem_shard_probe(1, '', NULL)$$),
 (52, 'idem_shard_probe', '(no Citus shard here)', $$SELECT idem_shard_probe(1, '', 'k')$$),
 (53, 'idem_pending_at', 'at (unknown records only)', $$SELECT count(*) FROM idem_pending_at(NULL)$$)
) AS m(ord, fn, arg, sql)
UNION ALL
-- the functions that write an outcome or a lease: key, their second
-- argument, scope and fence (and idem_fail's retryable) one at a time
SELECT 7 + w.n + a.n / 10.0, w.fn, coalesce(a.arg, w.second), format(a.sql, w.fn, w.value)
  FROM (VALUES (1, 'idem_finish', 'result', $$'{}'$$), (2, 'idem_fail', 'error', $$'{}'$$),
               (3, 'idem_mark_unknown', 'detail', $$'{}'$$), (4, 'idem_checkpoint', 'recovery_point', $$'p'$$),
               (5, 'idem_extend_lease', 'lease', $$'1 minute'$$)) AS w(n, fn, second, value)
 CROSS JOIN (VALUES (1, 'key', $$SELECT %1$s(NULL, %2$s)$$), (2, NULL, $$SELECT %1$s('leased', NULL, fence => 3)$$),
                    (3, 'retryable', $$SELECT %1$s('leased', %2$s, retryable => NULL, fence => 3)$$),
                    (4, 'scope', $$SELECT %1$s('leased', %2$s, scope => NULL, fence => 3)$$),
                    (5, 'fence (none: leased needs one)', $$SELECT %1$s('leased', %2$s, fence => NULL)$$)) AS a(n, arg, sql)
 WHERE a.arg IS DISTINCT FROM 'retryable' OR w.fn = 'idem_fail') AS m ORDER BY ord;
-- the procedure commits, so it cannot run in try()
CALL idem_purge_all(NULL);
\echo SQLSTATE :LAST_ERROR_SQLSTATE

-------------------------------------------------------------------------------
-- Keys and scopes: empty, long, odd bytes.  The limit is
-- idempotency.max_key_length bytes (255), in the database's encoding,
-- whatever the characters; the key is kept exactly as sent.
-------------------------------------------------------------------------------
SHOW idempotency.max_key_length;
-- claim: the outcome, then whether the record holds the key byte for byte
SELECT label, octet_length(k) AS bytes, char_length(k) AS chars,
       pg_temp.try(format('SELECT outcome FROM idem_claim(%L)', k),
                   format('SELECT count(*) || '' '' || bool_and(key = %L) FROM idempotent_record WHERE key = %L', k, k)) AS claim,
       pg_temp.try(format('SELECT outcome FROM idem_claim(''k'', scope => %L)', k),
                   format('SELECT count(*) || '' '' || bool_and(scope = %L) FROM idempotent_record WHERE scope = %L', k, k)) AS as_scope
  FROM (VALUES
 (1, 'empty', ''),
 (2, 'one space', ' '),
 (3, 'two spaces', '  '),
 (4, 'tab', E'\t'),
 (5, 'newline inside', E'a\nb'),
 (6, 'leading/trailing space', ' k '),
 (7, 'control character', E'k\x01'),
 (8, 'emoji', '🔑'),
 (9, 'combining accent (not normalized)', E'e\u0301'),
 (10, 'zero-width space', E'k\u200b'),
 (11, 'right-to-left mark', E'\u200fk'),
 (12, 'quote and backslash', E'k''"\\'),
 (13, 'SQL in a key', 'k''); DROP TABLE idempotent_record; --'),
 (14, '255 ASCII (255 bytes)', repeat('k', 255)),
 (15, '256 ASCII (256 bytes)', repeat('k', 256)),
 (16, '127 two-byte chars and 1 ASCII (255 bytes)', repeat('é', 127) || 'k'),
 (17, '128 two-byte chars (256 bytes)', repeat('é', 128)),
 (18, '63 emoji and 3 ASCII (255 bytes)', repeat('🔑', 63) || 'kkk'),
 (19, '64 emoji (256 bytes)', repeat('🔑', 64)),
 (20, '85 three-byte chars (255 bytes)', repeat('€', 85))
) AS v(ord, label, k) ORDER BY ord;
-- ... also for the functions that name a key without claiming it
SELECT fn, pg_temp.try(sql) AS answer FROM (VALUES
 (1, 'idem_finish empty key', $$SELECT idem_finish('', '{}', fence => 1)$$),
 (2, 'idem_finish 256 characters', $$SELECT idem_finish(repeat('k', 256), '{}', fence => 1)$$),
 (3, 'idem_fail empty key', $$SELECT idem_fail('', '{}', fence => 1)$$),
 (4, 'idem_mark_unknown 256 emoji', $$SELECT idem_mark_unknown(repeat('🔑', 256), '{}', fence => 1)$$),
 (5, 'idem_checkpoint empty scope is the default scope', $$SELECT idem_checkpoint('leased', 'p', scope => '', fence => 3)$$),
 (6, 'idem_extend_lease 256-character scope', $$SELECT idem_extend_lease('leased', '1 minute', scope => repeat('s', 256), fence => 3)$$),
 (7, 'idem_lookup empty key', $$SELECT count(*) FROM idem_lookup('')$$),
 (8, 'idem_lookup 256 characters', $$SELECT count(*) FROM idem_lookup(repeat('k', 256))$$),
 (9, 'idem_once empty key', $$SELECT idem_once('')$$),
 (10, 'idem_once 256 characters', $$SELECT idem_once(repeat('k', 256))$$),
 (11, 'idem_token_issue 256-character scope', $$SELECT idem_token_issue(repeat('s', 256))$$),
 (12, 'idem_token_consume 10 kB token', $$SELECT idem_token_consume(repeat('t', 10000), 'form')$$),
 (13, 'idem_claim ttl 0 of a finished key (checked before the key)', $$SELECT outcome FROM idem_claim('done', ttl => '0')$$)
) AS m(ord, fn, sql) ORDER BY ord;
-- the texts of the errors of the lists above, one call each
\set VERBOSITY default
SELECT bool_and(pg_temp.error_text(call)) AS all_refused FROM (VALUES
 ($$SELECT idem_claim(NULL)$$),
 ($$SELECT idem_fingerprint(NULL)$$),
 ($$SELECT idem_finish('leased', '{}')$$),
 ($$SELECT idem_transition('bim_orders', 1, 'paid', ARRAY[NULL])$$),
 ($$SELECT idem_transition_guard()$$),
 ($$SELECT idem_shard_probe(1, '', 'k')$$),
 ($$SELECT idem_claim('')$$),
 ($$SELECT idem_claim(repeat('k', 256))$$),
 ($$SELECT idem_claim('k', scope => repeat('s', 256))$$)
) AS v(call);
\set VERBOSITY terse
-- keys that differ only in white space, case or normalization are
-- different records
BEGIN;
SELECT format('%L', k) AS key, outcome FROM unnest(ARRAY[' ', '  ', 'k', 'K', 'k ', 'é', E'e\u0301']) AS k,
       LATERAL idem_claim(k) ORDER BY k COLLATE "C";
ROLLBACK;
-- the limit follows the setting, for keys and scopes alike
SET idempotency.max_key_length = 8;
SELECT pg_temp.try($$SELECT outcome FROM idem_claim('12345678')$$) AS key_of_8,
       pg_temp.try($$SELECT outcome FROM idem_claim('123456789')$$) AS key_of_9,
       pg_temp.try($$SELECT outcome FROM idem_claim('k', scope => 'éééééééé9')$$) AS scope_of_9;
RESET idempotency.max_key_length;
-- The primary key's B-tree holds an entry of (scope, key) of up to 2704
-- bytes (8 kB pages), and a value that does not compress is stored as it
-- is.  The setting's maximum, 1342 bytes, lets the worst case in: a key
-- and a scope of 1342 bytes each, of 3-byte characters in no pattern
-- (which do not compress), are claimed, indexed and replayed; one byte
-- more is refused with 22023 before anything is written.  (Up to 1.2 the
-- limit was 1024 characters, and such a key failed in the index: 54000.)
CREATE FUNCTION pg_temp.incompressible(bytes int, seed int) RETURNS text LANGUAGE sql AS $$
    SELECT repeat('x', bytes % 3) || string_agg(chr(19968 + (i * 7919 + seed) % 20000), '' ORDER BY i)
      FROM generate_series(1, bytes / 3) AS i $$;
-- at the setting's maximum, 1,024 three-byte characters (3,072 bytes) as a
-- key or a token's scope are refused (up to 1.2: 54000 from the index)
SELECT set_config('idempotency.max_key_length', max_val, false) AS max_key_length
  FROM pg_settings WHERE name = 'idempotency.max_key_length';
SELECT pg_temp.try(format('SELECT outcome FROM idem_claim(%L)', pg_temp.incompressible(3072, 0))) AS key_3072_bytes,
       pg_temp.try(format('SELECT idem_token_issue(%L)', pg_temp.incompressible(3072, 0))) AS token_scope_3072_bytes;
SELECT pg_temp.incompressible(1342, 0) AS key_1342, pg_temp.incompressible(1342, 1) AS scope_1342,
       pg_temp.incompressible(1343, 2) AS value_1343 \gset
SELECT octet_length(:'key_1342') AS key_bytes, octet_length(:'scope_1342') AS scope_bytes,
       octet_length(:'value_1343') AS over_bytes, char_length(:'key_1342') AS key_chars;
BEGIN;
SELECT outcome FROM idem_claim(:'key_1342', scope => :'scope_1342');
SELECT idem_finish(:'key_1342', '{"fits": true}', scope => :'scope_1342');
COMMIT;
SELECT outcome, result FROM idem_claim(:'key_1342', scope => :'scope_1342');
-- the entry is in the primary key
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SET plan_cache_mode = force_generic_plan;
PREPARE by_primary_key(text, text) AS
    SELECT octet_length(scope) AS scope_bytes, octet_length(key) AS key_bytes
      FROM idempotent_record WHERE scope = $1 AND key = $2;
EXPLAIN (COSTS OFF) EXECUTE by_primary_key(:'scope_1342', :'key_1342');
EXECUTE by_primary_key(:'scope_1342', :'key_1342');
DEALLOCATE by_primary_key;
RESET plan_cache_mode;
RESET enable_seqscan;
RESET enable_bitmapscan;
-- ... and for a role without privileges, through a scope grant of that
-- scope (idem_scope_grant's primary key holds it, beside the role's name)
CREATE ROLE regress_bi_app;
INSERT INTO idem_scope_grant VALUES ('regress_bi_app', :'scope_1342');
SET ROLE regress_bi_app;
SELECT outcome, result FROM idem_claim(:'key_1342', scope => :'scope_1342');
SELECT length(idem_token_issue(:'scope_1342')) AS token_length;
RESET ROLE;
DELETE FROM idem_scope_grant;
DROP ROLE regress_bi_app;
-- one byte over, as key or as scope, for every function that takes them
SELECT fn, pg_temp.try(format(sql, :'value_1343', :'key_1342')) AS answer FROM (VALUES
 (1, 'idem_claim key', $$SELECT outcome FROM idem_claim(%L, scope => %L)$$),
 (2, 'idem_claim scope', $$SELECT outcome FROM idem_claim(%2$L, scope => %1$L)$$),
 (3, 'idem_once key', $$SELECT idem_once(%L, scope => %L)$$),
 (4, 'idem_lookup scope', $$SELECT count(*) FROM idem_lookup(%2$L, scope => %1$L)$$),
 (5, 'idem_finish key', $$SELECT idem_finish(%L, '{}', scope => %L, fence => 1)$$),
 (6, 'idem_token_issue scope', $$SELECT idem_token_issue(%L)$$),
 (7, 'idem_token_issue scope of 1342 bytes', $$SELECT length(idem_token_issue(%2$L))$$)
) AS m(ord, fn, sql) ORDER BY ord;
-- the limit is the index's: an entry 8 bytes longer, written directly,
-- does not fit it
INSERT INTO idempotent_record (scope, key, created_at, updated_at, expires_at)
VALUES (:'scope_1342', pg_temp.incompressible(1350, 3), now(), now(), now() + interval '1 day');
DELETE FROM idempotent_record WHERE scope = :'scope_1342';
RESET idempotency.max_key_length;

-------------------------------------------------------------------------------
-- Intervals: ttl and lease must be positive (as intervals), and claim time
-- + interval must be a timestamp.  A leased claim cannot run in try()'s
-- subtransaction: 25001 there says that the lease passed its checks, and
-- the leases accepted claim in autocommit after the matrix.  A month is
-- 30 days and a year 365.25 days, as extract(epoch FROM ttl) counts them:
-- '1 month -30 days' and '1 year -365 days -6 hours' are zero whatever the
-- calendar says.
-------------------------------------------------------------------------------
SELECT i AS interval_value,
       pg_temp.try_code(format('SELECT outcome FROM idem_claim(''k'', ttl => %L)', i)) AS ttl,
       pg_temp.try_code(format('SELECT outcome FROM idem_claim(''k'', lease => %L)', i)) AS lease,
       pg_temp.try_code(format('SELECT idem_extend_lease(''leased'', %L, fence => 3) > now()', i)) AS extend_lease,
       pg_temp.try_code(format('SELECT length(idem_token_issue(''form'', %L))', i)) AS token_ttl,
       pg_temp.try_code(format('SELECT idem_once(''m'', ttl => %L)', i)) AS once_ttl
  FROM (VALUES ('0'), ('-1 second'), ('-1 day'), ('1 month -30 days'), ('1 month -31 days'),
               ('1 day -86400 seconds'), ('1 year -365 days -6 hours'), ('1 microsecond'), ('1 second'), ('1000 years'),
               ('300000 years'), ('178000000 years'), ('-178000000 years')) AS v(i);
-- the texts of the errors of the matrix above, one call each
\set VERBOSITY default
SELECT bool_and(pg_temp.error_text(call)) AS all_refused FROM (VALUES
 ($$SELECT outcome FROM idem_claim('k', ttl => '0')$$),
 ($$SELECT outcome FROM idem_claim('k', ttl => '300000 years')$$),
 ($$SELECT outcome FROM idem_claim('k', lease => '0')$$),
 ($$SELECT outcome FROM idem_claim('k', lease => '1 second')$$),
 ($$SELECT idem_extend_lease('leased', '300000 years', fence => 3)$$)
) AS v(call);
\set VERBOSITY terse
SELECT i AS lease, outcome
  FROM (VALUES ('1 microsecond'), ('1 second'), ('1000 years')) AS v(i),
       LATERAL idem_claim('lease ' || i, lease => i::interval);
SELECT key, locked_until - created_at AS lease FROM idempotent_record
 WHERE key LIKE 'lease %' ORDER BY locked_until;
DELETE FROM idempotent_record WHERE key LIKE 'lease %';
SELECT pg_temp.try($$SELECT idem_purge(0)$$) AS batch_0,
       pg_temp.try($$SELECT idem_purge(-1)$$) AS batch_negative,
       pg_temp.try($$SELECT idem_purge(2147483647)$$) AS batch_max;
-- settings refuse out-of-range values
-- (default_ttl's message names its unit differently between majors)
\set VERBOSITY sqlstate
SET idempotency.default_ttl = 0;
SET idempotency.default_ttl = -1;
\set VERBOSITY default
SET idempotency.max_key_length = 0;
SET idempotency.max_key_length = 1343;
SHOW idempotency.max_key_length;

-------------------------------------------------------------------------------
-- Wrong fences: IK003 for a live leased claim (stale, future, zero,
-- negative, the largest bigint), and the claim keeps its state
-------------------------------------------------------------------------------
SELECT f AS fence,
       pg_temp.try_code(format('SELECT idem_finish(''leased'', ''{"by": "wrong"}'', fence => %s)', f)) AS finish,
       pg_temp.try_code(format('SELECT idem_fail(''leased'', ''{}'', retryable => true, fence => %s)', f)) AS fail_retryable,
       pg_temp.try_code(format('SELECT idem_fail(''leased'', ''{}'', retryable => false, fence => %s)', f)) AS fail_final,
       pg_temp.try_code(format('SELECT idem_mark_unknown(''leased'', ''{}'', fence => %s)', f)) AS mark_unknown,
       pg_temp.try_code(format('SELECT idem_checkpoint(''leased'', ''p'', fence => %s)', f)) AS checkpoint,
       pg_temp.try_code(format('SELECT idem_extend_lease(''leased'', ''1 day'', fence => %s) > now()', f)) AS extend_lease
  FROM (VALUES ('1'), ('2'), ('3'), ('4'), ('0'), ('-1'), ('9223372036854775807'),
               ('-9223372036854775808')) AS v(f);
-- fences on records that are not in progress: an outcome is final (IK002
-- with the right fence, IK003 with another); an unknown outcome accepts
-- the right fence only
SELECT k AS key, f AS fence,
       pg_temp.try_code(format('SELECT idem_finish(%L, ''{"by": "wrong"}'', fence => %s)', k, f)) AS finish,
       pg_temp.try_code(format('SELECT idem_fail(%L, ''{}'', fence => %s)', k, f)) AS fail,
       pg_temp.try_code(format('SELECT idem_checkpoint(%L, ''p'', fence => %s)', k, f)) AS checkpoint
  FROM (VALUES ('done', '1'), ('done', '2'), ('declined', '1'), ('declined', '0'),
               ('unsure', '1'), ('unsure', '2'), ('absent', '1')) AS v(k, f);
-- the texts of the errors of the two matrices above, one call each
\set VERBOSITY default
SELECT bool_and(pg_temp.error_text(call)) AS all_refused FROM (VALUES
 ($$SELECT idem_finish('leased', '{}', fence => 2)$$),
 ($$SELECT idem_finish('leased', '{}', fence => 4)$$),
 ($$SELECT idem_finish('done', '{}', fence => 1)$$),
 ($$SELECT idem_checkpoint('unsure', 'p', fence => 1)$$),
 ($$SELECT idem_finish('absent', '{}', fence => 1)$$)
) AS v(call);
\set VERBOSITY terse

DROP TABLE bim_orders;
TRUNCATE idempotent_record;
TRUNCATE idempotency_token;
