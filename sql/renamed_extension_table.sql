-- A table or sequence of the extension that is no longer where the
-- install script put it (renamed by its owner, or gone) makes every call
-- that needs it fail with 42P01 naming it and the schema, before anything
-- is read, locked or written; never an internal error, and never OID 0
-- handed to a privilege check ("relation with OID 0 does not exist") or
-- to an open.  Each rename is rolled back.
TRUNCATE idempotent_record, idempotency_token, idempotency_outbox, idem_scope_grant;
CREATE ROLE regress_renamed_app;
GRANT USAGE ON SCHEMA public TO regress_renamed_app;

-- runs sql (with the caller's privileges, or as a role without privileges
-- on the tables: delegated mode) and returns its SQLSTATE and message
CREATE FUNCTION renamed_call(sql text, as_role text DEFAULT NULL) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    IF as_role IS NOT NULL THEN
        EXECUTE format('SET LOCAL ROLE %I', as_role);
    END IF;
    EXECUTE sql;
    RESET ROLE;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS result = MESSAGE_TEXT;
    RETURN SQLSTATE || ' ' || result;
END $$;

BEGIN;
ALTER TABLE idempotent_record RENAME TO idempotent_record_away;
SELECT renamed_call($$SELECT idem_claim('k')$$) AS claim;
SELECT renamed_call($$SELECT idem_claim('k', wait => false)$$) AS claim_nowait;
SELECT renamed_call($$SELECT idem_lookup('k')$$) AS lookup;
SELECT renamed_call($$SELECT idem_purge(10)$$) AS purge;
SELECT renamed_call($$SELECT idem_lookup('k')$$, 'regress_renamed_app') AS lookup_delegated;
ROLLBACK;

BEGIN;
ALTER TABLE idempotency_token RENAME TO idempotency_token_away;
SELECT renamed_call($$SELECT idem_token_issue('s')$$) AS token_issue;
SELECT renamed_call($$SELECT idem_token_consume('t', 's')$$) AS token_consume;
SELECT renamed_call($$SELECT idem_token_issue('s')$$, 'regress_renamed_app') AS token_issue_delegated;
SELECT renamed_call($$SELECT idem_purge(10)$$) AS purge;
ROLLBACK;

BEGIN;
ALTER TABLE idempotency_outbox RENAME TO idempotency_outbox_away;
SELECT renamed_call($$SELECT idem_outbox_enqueue('orders', '{}')$$) AS outbox_enqueue;
SELECT renamed_call($$SELECT * FROM idem_outbox_claim(10, '1 minute')$$) AS outbox_claim;
-- purge leaves an outbox it does not find alone (an extension older than
-- the library has none yet)
SELECT renamed_call($$SELECT idem_purge(10)$$) AS purge;
ROLLBACK;

BEGIN;
ALTER SEQUENCE idempotency_outbox_fence_seq RENAME TO idempotency_outbox_fence_seq_away;
SELECT idem_outbox_enqueue('orders', '{}') IS NOT NULL AS enqueued;
SELECT renamed_call($$SELECT * FROM idem_outbox_claim(10, '1 minute')$$) AS outbox_claim;
ROLLBACK;

BEGIN;
ALTER TABLE idem_scope_grant RENAME TO idem_scope_grant_away;
-- the delegated call reads the grants; a change to them tells every session
SELECT renamed_call($$SELECT idem_lookup('k', 'tenant')$$, 'regress_renamed_app') AS lookup_delegated;
SELECT renamed_call($$INSERT INTO idem_scope_grant_away VALUES ('regress_renamed_app', 'tenant')$$) AS grant_insert;
ROLLBACK;

-- all back where they were: every call works again
SELECT idem_token_consume(idem_token_issue('s'), 's') AS token_consumed;
BEGIN;
SELECT outcome FROM idem_claim('k');
SELECT idem_finish('k', '{"n": 1}');
COMMIT;
SELECT key, status FROM idem_lookup('k');
SELECT idem_outbox_enqueue('orders', '{}') IS NOT NULL AS enqueued;
SELECT count(*) AS claimed FROM idem_outbox_claim(10, '1 minute');

TRUNCATE idempotent_record, idempotency_token, idempotency_outbox, idem_scope_grant;
DROP FUNCTION renamed_call(text, text);
REVOKE USAGE ON SCHEMA public FROM regress_renamed_app;
DROP ROLE regress_renamed_app;
