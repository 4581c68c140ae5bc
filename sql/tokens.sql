-- Single-use tokens (README "idem_token_issue", "idem_token_consume"):
-- format, true exactly once, scope, expiry, transactions, errors,
-- privileges and search_path.  A concurrent burst of consumers is an
-- isolation spec (test/specs).
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotency_token;

-------------------------------------------------------------------------------
-- Issue: 22 characters of base64url (128 random bits), stored with its ttl
-------------------------------------------------------------------------------
SELECT idem_token_issue('form') AS t \gset
SELECT :'t' ~ '^[A-Za-z0-9_-]{22}$' AS url_safe_22_chars;
SELECT scope, token = :'t' AS same_token, expires_at - created_at AS ttl,
       consumed_at IS NULL AS unused, created_at <= clock_timestamp() AS server_clock
  FROM idempotency_token;
-- 22 characters carry 132 bits: the last one holds the 2 remaining bits
-- of 128, so it is always one of A, Q, g, w; a thousand tokens all differ
SELECT count(DISTINCT t) AS distinct_tokens,
       bool_and(t ~ '^[A-Za-z0-9_-]{21}[AQgw]$') AS all_128_bit
  FROM (SELECT idem_token_issue('bulk') AS t FROM generate_series(1, 1000)) AS s;
-- the default scope is '' and the default ttl 10 minutes; ttl is any
-- positive interval
SELECT idem_token_issue() AS t_default \gset
SELECT idem_token_issue('short', ttl => '2 seconds') AS t_short \gset
SELECT scope, expires_at - created_at AS ttl FROM idempotency_token
 WHERE token IN (:'t_default', :'t_short') ORDER BY scope;

-------------------------------------------------------------------------------
-- Consume: true exactly once
-------------------------------------------------------------------------------
SELECT idem_token_consume(:'t', 'form') AS first,
       idem_token_consume(:'t', 'form') AS second;
SELECT idem_token_consume(:'t', 'form') AS later;
SELECT consumed_at IS NOT NULL AS consumed FROM idempotency_token WHERE token = :'t';
-- another scope, the default scope, an unknown or empty token: false
SELECT idem_token_issue('form') AS t2 \gset
SELECT idem_token_consume(:'t2', 'other') AS other_scope,
       idem_token_consume(:'t2') AS default_scope,
       idem_token_consume('no-such-token', 'form') AS unknown,
       idem_token_consume('', 'form') AS empty,
       idem_token_consume(upper(:'t2'), 'form') AS case_matters;
-- ... and the token is still good in its own scope
SELECT idem_token_consume(:'t2', 'form') AS own_scope;
-- the default scope works like any other
SELECT idem_token_consume(:'t_default') AS default_scope_token;

-- expired: false, judged by the server clock
SELECT idem_token_issue('form') AS t3 \gset
UPDATE idempotency_token SET expires_at = clock_timestamp() - interval '1 second'
 WHERE token = :'t3';
SELECT idem_token_consume(:'t3', 'form') AS expired;

-------------------------------------------------------------------------------
-- Transactions: consuming is part of the caller's transaction
-------------------------------------------------------------------------------
SELECT idem_token_issue('form') AS t4 \gset
BEGIN;
SELECT idem_token_consume(:'t4', 'form') AS in_rolled_back_xact;
ROLLBACK;
-- the form handler failed and rolled back: the token can be used again
BEGIN;
SELECT idem_token_consume(:'t4', 'form') AS after_rollback;
SELECT idem_token_consume(:'t4', 'form') AS same_xact_again;
COMMIT;
-- a token issued in a transaction that rolls back never existed
BEGIN;
SELECT idem_token_issue('form') AS t5 \gset
ROLLBACK;
SELECT idem_token_consume(:'t5', 'form') AS issued_in_rolled_back_xact;
-- a savepoint rolled back undoes the consume too
SELECT idem_token_issue('form') AS t6 \gset
BEGIN;
SAVEPOINT s;
SELECT idem_token_consume(:'t6', 'form') AS in_savepoint;
ROLLBACK TO s;
SELECT idem_token_consume(:'t6', 'form') AS after_rollback_to_savepoint;
COMMIT;

-------------------------------------------------------------------------------
-- Errors
-------------------------------------------------------------------------------
SELECT count(*) AS tokens_before FROM idempotency_token \gset
-- 22004: NULL arguments (not STRICT)
SELECT idem_token_issue(NULL);
:sqlstate
SELECT idem_token_issue('form', NULL);
:sqlstate
SELECT idem_token_consume(NULL, 'form');
:sqlstate
SELECT idem_token_consume(:'t4', NULL);
:sqlstate
-- 22023: ttl not positive, scope too long
SELECT idem_token_issue('form', '0 seconds');
:sqlstate
SELECT idem_token_issue('form', '-1 minute');
:sqlstate
SELECT idem_token_issue('form', '1 month -30 days');
:sqlstate
SET idempotency.max_key_length = 8;
SELECT idem_token_issue('123456789');
:sqlstate
RESET idempotency.max_key_length;
-- 22008: ttl past the timestamp range
SELECT idem_token_issue('form', '300000 years');
:sqlstate
SELECT count(*) - :tokens_before AS tokens_added_by_errors FROM idempotency_token;
-- a scope of exactly max_key_length bytes is accepted
SET idempotency.max_key_length = 8;
SELECT length(idem_token_issue('12345678')) AS scope_at_the_limit;
RESET idempotency.max_key_length;

-------------------------------------------------------------------------------
-- Privileges: the caller's own (42501 without them)
-------------------------------------------------------------------------------
CREATE ROLE regress_tok_nobody;
CREATE ROLE regress_tok_app;
GRANT SELECT, INSERT, UPDATE ON idempotency_token TO regress_tok_app;
SELECT idem_token_issue('form') AS t7 \gset
SET ROLE regress_tok_nobody;
SELECT idem_token_issue('form');
:sqlstate
SELECT idem_token_consume(:'t7', 'form');
:sqlstate
SET ROLE regress_tok_app;
SELECT idem_token_issue('app') AS t8 \gset
SELECT idem_token_consume(:'t8', 'app') AS app_consumes,
       idem_token_consume(:'t7', 'form') AS app_consumes_other;
RESET ROLE;
-- row level security applies: a token the policy hides is unknown
ALTER TABLE idempotency_token ENABLE ROW LEVEL SECURITY;
CREATE POLICY tok_app_only ON idempotency_token TO regress_tok_app
    USING (scope = 'app') WITH CHECK (scope = 'app');
SELECT idem_token_issue('form') AS t9 \gset
SET ROLE regress_tok_app;
SELECT idem_token_consume(:'t9', 'form') AS hidden_by_policy;
SELECT idem_token_issue('form');
:sqlstate
RESET ROLE;
DROP POLICY tok_app_only ON idempotency_token;
ALTER TABLE idempotency_token DISABLE ROW LEVEL SECURITY;
SELECT idem_token_consume(:'t9', 'form') AS owner_consumes;

-------------------------------------------------------------------------------
-- search_path: operators and tables named like ours in a schema searched
-- first change nothing (a new backend, so no plan was prepared before)
-------------------------------------------------------------------------------
CREATE SCHEMA tok_evil;
\i sql/include/planted_operator.sql
SELECT pg_temp.plant_operator('tok_evil', op, typ) AS planted
  FROM (VALUES ('=', 'text'), ('>', 'timestamptz')) AS v(op, typ);
CREATE TABLE tok_evil.idempotency_token (LIKE idempotency_token);
\c
SET search_path = tok_evil, pg_catalog, public;
SELECT public.idem_token_issue('evil') AS t10 \gset
SELECT public.idem_token_consume(:'t10', 'evil') AS first,
       public.idem_token_consume(:'t10', 'evil') AS second;
SELECT count(*) AS planted_table_rows FROM idempotency_token;
RESET search_path;
SELECT count(*) AS real_rows FROM idempotency_token WHERE scope = 'evil';

-------------------------------------------------------------------------------
-- Clean up
-------------------------------------------------------------------------------
SET client_min_messages = warning;
DROP SCHEMA tok_evil CASCADE;
RESET client_min_messages;
REVOKE ALL ON idempotency_token FROM regress_tok_app;
DROP ROLE regress_tok_nobody, regress_tok_app;
TRUNCATE idempotency_token;
