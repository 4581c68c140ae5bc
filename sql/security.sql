-- Security in invoker mode: a role with privileges on the tables works with
-- them and with row level security (none is SECURITY DEFINER, and the
-- views are security_invoker: sql/surface.sql); roles without any are in
-- least_privilege.sql.  search_path attacks are in search_path.sql
-- (records) and tokens.sql (tokens).
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
-- errors without CONTEXT: the internal statements are not the contract
\set VERBOSITY terse
-- the table's content, to show that refused calls changed nothing
\set snapshot 'SELECT count(*) AS records, md5(string_agg(format(''%s|%s|%s|%s|%s|%s|%s|%s|%s'', scope, key, status, fingerprint, result, recovery_point, fence, locked_until, expires_at), '','' ORDER BY scope, key)) AS content FROM idempotent_record'
TRUNCATE idempotent_record;

-------------------------------------------------------------------------------
-- Row level security on scope (the policy of docs/operations.md): one
-- application role, the tenant in a setting
-------------------------------------------------------------------------------
CREATE ROLE regress_sec_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON idempotent_record TO regress_sec_app;
GRANT SELECT ON idem_pending TO regress_sec_app;
ALTER TABLE idempotent_record ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON idempotent_record TO regress_sec_app
    USING (scope = current_setting('app.tenant'))
    WITH CHECK (scope = current_setting('app.tenant'));

SET ROLE regress_sec_app;
-- tenant A: claims, finishes, replays in its own scope
SET app.tenant = 'tenant_a';
BEGIN;
SELECT outcome, fence FROM idem_claim('ord-1', scope => 'tenant_a',
                                      fingerprint => idem_fingerprint('{"sku": 1}'));
SELECT idem_finish('ord-1', '{"order_id": 1001, "card": "4242"}', scope => 'tenant_a');
COMMIT;
SELECT outcome, result FROM idem_claim('ord-1', scope => 'tenant_a');
-- ... a leased claim in progress, and a final failure
SELECT outcome, fence FROM idem_claim('pay-1', scope => 'tenant_a', lease => '1 hour');
BEGIN;
SELECT outcome FROM idem_claim('ord-2', scope => 'tenant_a');
SELECT idem_fail('ord-2', '{"error": "declined"}', retryable => false, scope => 'tenant_a');
COMMIT;

RESET ROLE;
:snapshot \gset before_
\i sql/include/try.sql
CREATE TABLE pg_temp.sec_calls (n serial, call text);
INSERT INTO pg_temp.sec_calls (call) VALUES
    ($$SELECT * FROM idem_claim('ord-1', scope => 'tenant_a')$$),
    ($$SELECT * FROM idem_claim('ord-1', scope => 'tenant_a', fingerprint => idem_fingerprint('{"sku": 1}'))$$),
    ($$SELECT * FROM idem_claim('ord-1', scope => 'tenant_a', wait => false)$$), ($$SELECT * FROM idem_claim('ord-2', scope => 'tenant_a')$$),
    ($$SELECT * FROM idem_claim('never-used', scope => 'tenant_a')$$), ($$SELECT * FROM idem_claim('brand-new')$$),
    ($$SELECT * FROM idem_claim('brand-new', wait => false)$$),
    ($$SELECT idem_finish('pay-1', '{"by": "B"}', scope => 'tenant_a', fence => 1)$$),
    ($$SELECT idem_finish('pay-1', '{"by": "B"}', scope => 'tenant_a')$$),
    ($$SELECT idem_fail('pay-1', '{"by": "B"}', scope => 'tenant_a', fence => 1)$$),
    ($$SELECT idem_fail('ord-1', '{"by": "B"}', retryable => true, scope => 'tenant_a', fence => 1)$$),
    ($$SELECT idem_mark_unknown('pay-1', '{"by": "B"}', scope => 'tenant_a', fence => 1)$$),
    ($$SELECT idem_checkpoint('pay-1', 'by B', scope => 'tenant_a', fence => 1)$$),
    ($$SELECT idem_extend_lease('pay-1', '1 day', scope => 'tenant_a', fence => 1)$$),
    ($$SELECT * FROM idem_lookup('ord-1', 'tenant_a')$$), ($$SELECT * FROM idem_pending$$),
    ($$SELECT idem_purge(10)$$), ($$CALL idem_purge_all(10)$$), ($$SELECT idem_stats_reset()$$),
    ($$SELECT idem_token_issue('form')$$), ($$SELECT idem_token_consume('AAAAAAAAAAAAAAAAAAAAAA', 'form')$$);
GRANT SELECT ON pg_temp.sec_calls TO PUBLIC;
SET ROLE regress_sec_app;

-- tenant B aims at tenant A's keys in tenant A's scope.  The records are
-- invisible to B, so a claim tries to create one, and the policy's WITH
-- CHECK refuses that: 42501, neither a replay of A's result nor a claim
SET app.tenant = 'tenant_b';
-- Every function, called by each role in turn (pg_temp.try shows the
-- SQLSTATE and message; what a call did is kept, as it would be; a leased
-- claim must be a statement of its own, so it is called on its own).  For
-- tenant B: claims of A's keys, and of a key A never used in A's scope,
-- get the same 42501, so B cannot tell A's keys from unused ones; writing,
-- with or without the fence A's claims hold, gets IK002 "no record", the
-- same as for a key that does not exist; reading finds nothing.
SELECT n, call, pg_temp.try(call, keep => true) AS tenant_b FROM pg_temp.sec_calls ORDER BY n;
SELECT * FROM idem_claim('pay-1', scope => 'tenant_a', lease => '1 minute');
:sqlstate
-- reading: nothing
SELECT count(*) AS visible FROM idem_lookup('ord-1', 'tenant_a');
SELECT count(*) AS visible FROM idempotent_record;
SELECT count(*) AS pending_visible FROM idem_pending;
-- plain SQL is held by the same policy
UPDATE idempotent_record SET result = '{"by": "B"}' WHERE scope = 'tenant_a';
DELETE FROM idempotent_record WHERE scope = 'tenant_a';
INSERT INTO idempotent_record (scope, key, status, created_at, updated_at, expires_at)
VALUES ('tenant_a', 'planted', 'succeeded', now(), now(), now() + interval '1 day');
:sqlstate
-- the same key in B's own scope is B's own record
BEGIN;
SELECT outcome, fence FROM idem_claim('ord-1', scope => 'tenant_b', fingerprint => idem_fingerprint('{"sku": 2}'));
SELECT idem_finish('ord-1', '{"order_id": 2001}', scope => 'tenant_b');
COMMIT;
SELECT outcome, result FROM idem_claim('ord-1', scope => 'tenant_b');
SELECT scope, key, status FROM idempotent_record;
-- with the setting reset (to '') the policy admits no tenant's scope
RESET app.tenant;
SELECT * FROM idem_claim('ord-1', scope => 'tenant_b');
:sqlstate
RESET ROLE;

-- tenant A's records are exactly as they were
SELECT count(*) AS records, md5(string_agg(format('%s|%s|%s|%s|%s|%s|%s|%s|%s', scope, key, status, fingerprint, result, recovery_point, fence, locked_until, expires_at), ',' ORDER BY scope, key)) = :'before_content' AS unchanged
  FROM idempotent_record WHERE scope = 'tenant_a';
SELECT scope, key, status, result, fence FROM idempotent_record ORDER BY scope, key;

-- and A still replays them
SET ROLE regress_sec_app;
SET app.tenant = 'tenant_a';
SELECT outcome, result FROM idem_claim('ord-1', scope => 'tenant_a');
SELECT outcome, status, result FROM idem_claim('ord-2', scope => 'tenant_a');
SELECT outcome, status, fence FROM idem_claim('pay-1', scope => 'tenant_a');
-- idem_pending runs with the caller's policies: A's unknown outcome is
-- listed for A only
SELECT idem_mark_unknown('pay-1', '{"provider": "timeout"}', scope => 'tenant_a', fence => 1);
SELECT scope, key, status FROM idem_pending;
SET app.tenant = 'tenant_b';
SELECT scope, key, status FROM idem_pending;
SET app.tenant = 'tenant_a';
SELECT idem_finish('pay-1', '{"charge": "ch_a"}', scope => 'tenant_a', fence => 1);
RESET ROLE;
RESET app.tenant;

DROP POLICY tenant_isolation ON idempotent_record;

-- A policy that hides records but lets the role insert them: the claim
-- cannot see what its insert runs into, and says so (42501) instead of
-- retrying for ever; idem_once too
CREATE POLICY recent_only ON idempotent_record TO regress_sec_app
    USING (created_at > now() - interval '1 hour') WITH CHECK (true);
INSERT INTO idempotent_record (scope, key, status, fence, created_at, updated_at, expires_at)
VALUES ('', 'old-key', 'succeeded', 1, now() - interval '2 hours', now() - interval '2 hours', now() + interval '20 hours');
SET ROLE regress_sec_app;
SET statement_timeout = '60s';
SELECT outcome FROM idem_claim('old-key', lease => '10 seconds');
:sqlstate
SELECT idem_once('old-key');
:sqlstate
RESET statement_timeout;
RESET ROLE;
SELECT status, fence FROM idempotent_record WHERE key = 'old-key';
DELETE FROM idempotent_record WHERE key = 'old-key';
DROP POLICY recent_only ON idempotent_record;
ALTER TABLE idempotent_record DISABLE ROW LEVEL SECURITY;

-------------------------------------------------------------------------------
-- A role without privileges on the table: 42501 from every function,
-- nothing changes
-------------------------------------------------------------------------------
CREATE ROLE regress_sec_nobody;
:snapshot \gset before_
SET ROLE regress_sec_nobody;
SELECT n, pg_temp.try(call, keep => true) AS nobody FROM pg_temp.sec_calls ORDER BY n;
SELECT * FROM idem_claim('brand-new', lease => '1 minute');
:sqlstate
-- fingerprints read no table
SELECT length(idem_fingerprint('{"a": 1}')) AS fingerprint_bytes;
RESET ROLE;
SELECT count(*) AS records, md5(string_agg(format('%s|%s|%s|%s|%s|%s|%s|%s|%s', scope, key, status, fingerprint, result, recovery_point, fence, locked_until, expires_at), ',' ORDER BY scope, key)) = :'before_content' AS unchanged
  FROM idempotent_record;

-- SELECT alone: replays work (a read-only role can answer duplicates),
-- anything that writes is refused
CREATE ROLE regress_sec_reader;
GRANT SELECT ON idempotent_record TO regress_sec_reader;
SET ROLE regress_sec_reader;
SELECT outcome, result FROM idem_claim('ord-1', scope => 'tenant_a');
SELECT n, pg_temp.try(call, keep => true) AS reader FROM pg_temp.sec_calls ORDER BY n;
RESET ROLE;
SELECT count(*) AS records, md5(string_agg(format('%s|%s|%s|%s|%s|%s|%s|%s|%s', scope, key, status, fingerprint, result, recovery_point, fence, locked_until, expires_at), ',' ORDER BY scope, key)) = :'before_content' AS unchanged
  FROM idempotent_record;

-- revoking EXECUTE from PUBLIC takes the functions away from a role that
-- has table privileges (for deployments that grant them one by one)
REVOKE EXECUTE ON FUNCTION idem_claim(text, text, bytea, interval, boolean, interval, interval) FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON idempotent_record TO regress_sec_nobody;
SET ROLE regress_sec_nobody;
SELECT * FROM idem_claim('brand-new');
:sqlstate
RESET ROLE;
GRANT EXECUTE ON FUNCTION idem_claim(text, text, bytea, interval, boolean, interval, interval) TO PUBLIC;

-------------------------------------------------------------------------------
-- Clean up
-------------------------------------------------------------------------------
REVOKE ALL ON idempotent_record FROM regress_sec_app, regress_sec_nobody, regress_sec_reader;
REVOKE ALL ON idem_pending FROM regress_sec_app;
DROP ROLE regress_sec_app, regress_sec_nobody, regress_sec_reader;
TRUNCATE idempotent_record;
