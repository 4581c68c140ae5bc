-- A leased claim commits on its own (README "idem_claim", lease): inside a
-- transaction block, a subtransaction or a pipeline it would roll back
-- with the work around it after the caller was told "claimed", so it is
-- refused there with 25001 and writes nothing.  It works as a statement of
-- its own in autocommit (what a transaction-pooling PgBouncer sends), in a
-- procedure's or DO block's own transaction, also after a COMMIT there.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;

-- autocommit: claimed, and committed at once
SELECT outcome, fence FROM idem_claim('lc-auto', lease => '1 minute');
SELECT key, status, fence FROM idempotent_record WHERE key = 'lc-auto';

-- BEGIN (what psycopg or JDBC with autocommit off opens implicitly):
-- refused, whatever the claim would have answered, nothing written
BEGIN;
SELECT outcome FROM idem_claim('lc-block', lease => '1 minute');
:sqlstate
ROLLBACK;
BEGIN;
SELECT outcome FROM idem_claim('lc-auto', lease => '1 minute', wait => false);
:sqlstate
ROLLBACK;
-- also as the only statement between BEGIN and COMMIT, and after
-- SET TRANSACTION
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT outcome FROM idem_claim('lc-block', lease => '1 minute');
:sqlstate
COMMIT;
SELECT count(*) AS written FROM idempotent_record WHERE key = 'lc-block';

-- an in-transaction claim (no lease) still belongs to the block
BEGIN;
SELECT outcome, status, fence, retry_after FROM idem_claim('lc-in-tx');
SELECT idem_finish('lc-in-tx', '{"ok": true}');
COMMIT;
SELECT key, status, result FROM idempotent_record WHERE key = 'lc-in-tx';

-- two statements sent as one query string run in one implicit transaction
SELECT 1 AS first \; SELECT outcome FROM idem_claim('lc-multi', lease => '1 minute');
:sqlstate
SELECT count(*) AS written FROM idempotent_record WHERE key = 'lc-multi';

-- a subtransaction (an exception block) could roll back the claim alone
DO $$
BEGIN
    BEGIN
        PERFORM idem_claim('lc-subxact', lease => '1 minute');
    EXCEPTION WHEN active_sql_transaction THEN
        RAISE NOTICE 'refused in a subtransaction: %', SQLERRM;
    END;
END$$;
SELECT count(*) AS written FROM idempotent_record WHERE key = 'lc-subxact';

-- a procedure's own transaction: the claim commits with the procedure's
-- COMMIT, and another claim after it runs in the next transaction (which
-- an error after it rolls back, as any statement of that transaction)
CREATE PROCEDURE lc_worker(k text, fail boolean DEFAULT false)
LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    SELECT outcome, fence INTO c FROM idem_claim(k, lease => '1 minute');
    RAISE NOTICE 'first claim of %: % with fence %', k, c.outcome, c.fence;
    COMMIT;
    SELECT outcome, fence INTO c FROM idem_claim(k || '-2', lease => '1 minute');
    RAISE NOTICE 'second claim: % with fence %', c.outcome, c.fence;
    IF fail THEN
        RAISE EXCEPTION 'the worker failed before its COMMIT';
    END IF;
    COMMIT;
END$$;
CALL lc_worker('lc-proc');
CALL lc_worker('lc-proc-fail', fail => true);
SELECT key, status, fence FROM idempotent_record WHERE key LIKE 'lc-proc%' ORDER BY key;
-- ... but a CALL inside a transaction block runs in that block
BEGIN;
CALL lc_worker('lc-proc-in-block');
:sqlstate
ROLLBACK;
SELECT count(*) AS written FROM idempotent_record WHERE key LIKE 'lc-proc-in-block%';

-- a DO block in autocommit is a statement of its own
DO $$
BEGIN
    RAISE NOTICE 'DO block: %', (SELECT outcome FROM idem_claim('lc-do', lease => '1 minute'));
END$$;
SELECT key, status, fence FROM idempotent_record WHERE key = 'lc-do';

-- the error, with the key
BEGIN;
SELECT outcome FROM idem_claim('lc-msg', scope => 'acct', lease => '1 minute');
ROLLBACK;

DROP PROCEDURE lc_worker(text, boolean);
TRUNCATE idempotent_record;
