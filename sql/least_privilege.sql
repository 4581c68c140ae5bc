-- Least privilege: a role with no privileges on the extension's tables
-- uses the functions in the scopes idem_scope_grant grants it (directly or
-- through a role it is a member of); the functions then work as the
-- tables' owner.  It cannot forge a fence, rewrite a result, plant or
-- delete a record, or reach another scope, and a role that holds the table
-- privileges keeps working with its own (invoker mode).
\set VERBOSITY terse
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;
CREATE ROLE regress_lp_owner NOLOGIN;
CREATE ROLE regress_lp_tenants NOLOGIN;
CREATE ROLE regress_lp_app LOGIN IN ROLE regress_lp_tenants;
CREATE ROLE regress_lp_other LOGIN;
-- the tables move to a dedicated owner that nobody logs in as
ALTER TABLE idempotent_record OWNER TO regress_lp_owner;
ALTER TABLE idempotency_token OWNER TO regress_lp_owner;
INSERT INTO idem_scope_grant VALUES
    ('regress_lp_tenants', 'tenant_a'),
    ('regress_lp_app', 'shop:*'),
    ('regress_lp_other', '{app.tenant}');
GRANT SELECT ON idem_pending TO regress_lp_tenants;
-- a record of a scope the application is not granted
INSERT INTO idempotent_record (scope, key, status, fence, created_at, updated_at, expires_at)
VALUES ('tenant_z', 'z1', 'unknown', 1, now(), now(), now() + interval '1 day');

-- the application role has no table privileges: every plain statement on
-- the tables is refused, so nothing can be forged
\i sql/include/try.sql
SET ROLE regress_lp_app;
SELECT count(*) FROM idempotent_record;
:sqlstate

-- in its scopes every function works
BEGIN;
SELECT outcome, fence FROM idem_claim('k1', scope => 'tenant_a', fingerprint => '\x01');
SELECT idem_finish('k1', '{"order_id": 1}', scope => 'tenant_a');
COMMIT;
SELECT outcome, result FROM idem_claim('k1', scope => 'tenant_a', fingerprint => '\x01');
BEGIN;
SELECT outcome FROM idem_claim('k2', scope => 'tenant_a');
SELECT idem_finish_response('k2', 201, '{}', '\x6f6b', scope => 'tenant_a');
COMMIT;
SELECT outcome, result FROM idem_claim('k2', scope => 'tenant_a');
SELECT outcome, fence FROM idem_claim('pay-1', scope => 'shop:eu', lease => '1 minute');
SELECT idem_checkpoint('pay-1', 'charged', scope => 'shop:eu', fence => 1);
SELECT idem_extend_lease('pay-1', '2 minutes', scope => 'shop:eu', fence => 1) > now() AS extended;
SELECT idem_mark_unknown('pay-1', '{"provider": "timeout"}', scope => 'shop:eu', fence => 1);
-- idem_pending shows the granted scopes only
SELECT scope, key, status, fence, recovery_point FROM idem_pending;
SELECT idem_fail('pay-1', '{"error": "declined"}', retryable => false, scope => 'shop:eu', fence => 1);
SELECT key, status, result FROM idem_lookup('pay-1', 'shop:eu');
SELECT idem_once('m1', scope => 'tenant_a'), idem_once('m1', scope => 'tenant_a');
SELECT idem_token_consume(idem_token_issue('shop:form'), 'shop:form');

-- in another scope: 42501 before anything is read, for used and unused
-- keys ('shop:*' is a prefix, not a pattern inside the scope); and the
-- forgeries as plain SQL: a fence set back, a rewritten result, a planted
-- record, a deleted record, the table emptied, a token reset, read,
-- planted or deleted, a grant added
SELECT call, pg_temp.try(call) AS answer FROM (VALUES
  ($$SELECT outcome FROM idem_claim('k1', scope => 'tenant_b')$$),
  ($$SELECT outcome FROM idem_claim('never-used', scope => 'tenant_b')$$),
  ($$SELECT count(*) FROM idem_lookup('k1', 'tenant_b')$$),
  ($$SELECT idem_finish('k1', '{}', scope => 'tenant_b', fence => 1)$$),
  ($$SELECT idem_finish_response('k1', 200, '{}', '\x00', scope => 'tenant_b', fence => 1)$$),
  ($$SELECT idem_once('m1', scope => 'tenant_b')$$),
  ($$SELECT idem_token_issue('tenant_b')$$),
  ($$SELECT outcome FROM idem_claim('k1', scope => 'shopping')$$),
  ($$UPDATE idempotent_record SET fence = 1 WHERE key = 'pay-1'$$),
  ($$UPDATE idempotent_record SET result = '{"order_id": 666}' WHERE key = 'k1'$$),
  ($$INSERT INTO idempotent_record (scope, key, status, fence, created_at, updated_at, expires_at) VALUES ('tenant_a', 'planted', 'succeeded', 1, now(), now(), now() + interval '1 day')$$),
  ($$DELETE FROM idempotent_record WHERE key = 'k1'$$),
  ($$TRUNCATE idempotent_record$$),
  ($$UPDATE idempotency_token SET consumed_at = NULL$$),
  ($$SELECT count(*) FROM idempotency_token$$),
  ($$INSERT INTO idempotency_token (scope, token, created_at, expires_at) VALUES ('shop:form', 'forged', now(), now() + interval '1 hour')$$),
  ($$DELETE FROM idempotency_token$$),
  ($$TRUNCATE idempotency_token$$),
  ($$INSERT INTO idem_scope_grant VALUES ('regress_lp_app', '*')$$)
) AS c(call);
-- purge stays revoked from PUBLIC
SELECT idem_purge();
:sqlstate
RESET ROLE;

-- a scope named by a setting counts only when set for the transaction
SET ROLE regress_lp_other;
SET app.tenant = 'tenant_c';
SELECT * FROM idem_claim('s1', scope => 'tenant_c');
:sqlstate
BEGIN;
SET LOCAL app.tenant = 'tenant_c';
SELECT outcome FROM idem_claim('s1', scope => 'tenant_c');
SELECT idem_finish('s1', '{}', scope => 'tenant_c');
COMMIT;
BEGIN;
SELECT set_config('app.tenant', 'tenant_c', true);
SELECT idem_scope_permitted('tenant_c') AS permitted, idem_scope_permitted('tenant_a') AS other;
SELECT key, status FROM idem_lookup('s1', 'tenant_c');
COMMIT;
RESET app.tenant;
RESET ROLE;

-- a grant takes effect at once, and so does its removal
INSERT INTO idem_scope_grant VALUES ('regress_lp_app', 'tenant_b');
SET ROLE regress_lp_app;
SELECT outcome FROM idem_claim('b1', scope => 'tenant_b', lease => '1 minute');
RESET ROLE;
DELETE FROM idem_scope_grant WHERE pattern = 'tenant_b';
SET ROLE regress_lp_app;
SELECT * FROM idem_claim('b1', scope => 'tenant_b');
:sqlstate
RESET ROLE;

-- a role with the table privileges keeps invoker mode: grants do not
-- matter, its own privileges (and row level security) do
GRANT SELECT, INSERT, UPDATE ON idempotent_record TO regress_lp_other;
SET ROLE regress_lp_other;
SELECT outcome FROM idem_claim('inv-1', scope => 'anything', lease => '1 minute');
RESET ROLE;

-- the records as the owner sees them: nothing forged
SELECT scope, key, status, fence, result FROM idempotent_record ORDER BY scope, key;

-- clean up
ALTER TABLE idempotent_record OWNER TO CURRENT_USER;
ALTER TABLE idempotency_token OWNER TO CURRENT_USER;
TRUNCATE idempotent_record, idempotency_token, idem_scope_grant;
REVOKE SELECT ON idem_pending FROM regress_lp_tenants;
DROP OWNED BY regress_lp_other;
DROP ROLE regress_lp_app, regress_lp_tenants, regress_lp_other, regress_lp_owner;
