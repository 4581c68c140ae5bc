-- The commit guard: no committed in-transaction claim without an outcome
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;

-- COMMIT without finish/fail: IK004, the transaction rolls back whole
CREATE TABLE guard_orders (id int);
BEGIN;
SELECT outcome FROM idem_claim('g1');
INSERT INTO guard_orders VALUES (1);
COMMIT;
:sqlstate
SELECT count(*) AS records FROM idempotent_record;
SELECT count(*) AS orders FROM guard_orders;

-- an autocommit claim is a transaction of its own: it cannot commit either
SELECT outcome FROM idem_claim('g1');
:sqlstate
SELECT count(*) AS records FROM idempotent_record;

-- the detail counts every open claim
BEGIN;
SELECT outcome FROM idem_claim('g1');
SELECT outcome FROM idem_claim('g2');
SELECT outcome FROM idem_claim('g3');
SELECT idem_finish('g2', '{}');
COMMIT;
:sqlstate
SELECT count(*) AS records FROM idempotent_record;

-- a claim rolled back with its transaction, or with a subtransaction, is
-- forgotten: it leaves no record, and COMMIT succeeds
BEGIN;
SELECT outcome FROM idem_claim('g5');
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT outcome FROM idem_claim('g5');
ROLLBACK TO s;
COMMIT;
SELECT count(*) AS records FROM idempotent_record WHERE key = 'g5';
BEGIN;
SELECT outcome, fence FROM idem_claim('g5');
SELECT idem_finish('g5', '{}');
COMMIT;

-- an outcome recorded in a rolled-back subtransaction is forgotten too:
-- the claim is open again
BEGIN;
SELECT outcome FROM idem_claim('g6');
SAVEPOINT s;
SELECT idem_finish('g6', '{"n": 1}');
ROLLBACK TO s;
SELECT status FROM idempotent_record WHERE key = 'g6';
COMMIT;
:sqlstate
BEGIN;
SELECT outcome FROM idem_claim('g6');
SAVEPOINT s;
SELECT idem_finish('g6', '{"n": 1}');
ROLLBACK TO s;
SELECT idem_finish('g6', '{"n": 2}');
COMMIT;
SELECT outcome, result FROM idem_claim('g6');

-- claims and outcomes in released (committed) subtransactions stay
BEGIN;
SAVEPOINT a;
SELECT outcome FROM idem_claim('g7');
SAVEPOINT b;
SELECT idem_finish('g7', '{"nested": true}');
RELEASE SAVEPOINT b;
RELEASE SAVEPOINT a;
COMMIT;
SELECT outcome, result FROM idem_claim('g7');
-- a claim released into a parent that then rolls back is forgotten
BEGIN;
SAVEPOINT a;
SAVEPOINT b;
SELECT outcome FROM idem_claim('g8');
RELEASE SAVEPOINT b;
ROLLBACK TO a;
COMMIT;
SELECT count(*) AS records FROM idempotent_record WHERE key = 'g8';

-- plpgsql exception blocks are subtransactions: same rules
DO $$
BEGIN
    BEGIN
        PERFORM idem_claim('g9');
        RAISE EXCEPTION 'business error';
    EXCEPTION WHEN raise_exception THEN
        RAISE NOTICE 'claim of g9 rolled back with the business error';
    END;
END $$;
SELECT count(*) AS records FROM idempotent_record WHERE key = 'g9';

-- a key released by a retryable failure can be claimed again in the same
-- transaction, and that new claim needs its own outcome
BEGIN;
SELECT outcome FROM idem_claim('g10');
SELECT idem_fail('g10', '{}');
SELECT outcome FROM idem_claim('g10');
COMMIT;
:sqlstate
BEGIN;
SELECT outcome FROM idem_claim('g10');
SELECT idem_fail('g10', '{}');
SELECT outcome FROM idem_claim('g10');
SELECT idem_finish('g10', '{"second": true}');
COMMIT;
SELECT outcome, result FROM idem_claim('g10');

-- a claim made again after this transaction deleted the key's record
-- supersedes the first claim: the outcome of the newest claim is enough,
-- in any statement shape (here the claim runs in DELETE ... RETURNING)
BEGIN;
SELECT outcome, fence FROM idem_claim('g12');
DELETE FROM idempotent_record r WHERE r.key = 'g12'
  RETURNING (SELECT c.outcome FROM idem_claim(r.key) c);
SELECT idem_finish('g12', '{"after_delete": true}');
COMMIT;
SELECT outcome, result FROM idem_claim('g12');
-- the newest claim still needs its outcome, and when it is rolled back
-- the first claim is the newest again: still IK004
BEGIN;
SELECT outcome FROM idem_claim('g13');
DELETE FROM idempotent_record WHERE key = 'g13';
SELECT outcome FROM idem_claim('g13');
COMMIT;
:sqlstate
BEGIN;
SELECT outcome FROM idem_claim('g13');
DELETE FROM idempotent_record WHERE key = 'g13';
SAVEPOINT s;
SELECT outcome FROM idem_claim('g13');
SELECT idem_finish('g13', '{}');
ROLLBACK TO s;
COMMIT;
:sqlstate
SELECT count(*) AS records FROM idempotent_record WHERE key = 'g13';

-- an error rolls the whole transaction back, claims included
BEGIN;
SELECT outcome FROM idem_claim('g11');
SELECT 1/0;
COMMIT;
SELECT count(*) AS records FROM idempotent_record WHERE key = 'g11';

DROP TABLE guard_orders;
TRUNCATE idempotent_record;
