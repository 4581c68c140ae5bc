-- idem_claim's wait_for_outcome: what it refuses before waiting, and what
-- it answers without anything to wait for (the waits themselves are in
-- test/specs/wait_for_outcome.spec).  The test cluster preloads the library.
\set VERBOSITY terse
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'

-- nothing to wait for: a free key is claimed, a finished one replays
SELECT outcome, fence FROM idem_claim('w-free', lease => '1 minute', wait_for_outcome => '10 seconds');
SELECT idem_finish('w-free', '{"ok": true}', fence => 1);
SELECT outcome, result FROM idem_claim('w-free', wait_for_outcome => '10 seconds');

-- bad bounds are refused
SELECT * FROM idem_claim('w-bad', wait_for_outcome => '0');
:sqlstate
SELECT * FROM idem_claim('w-bad', wait_for_outcome => '-1 second');
:sqlstate
SELECT * FROM idem_claim('w-bad', wait_for_outcome => '1 month -30 days');
:sqlstate
SELECT * FROM idem_claim('w-bad', wait_for_outcome => '300000 years');
:sqlstate

-- a transaction that has written or locked rows cannot wait: its locks
-- could block the outcome, unseen by the deadlock detector
CREATE TABLE w_orders (id int PRIMARY KEY, n int);
INSERT INTO w_orders VALUES (1, 0);
BEGIN;
UPDATE w_orders SET n = n + 1 WHERE id = 1;
SELECT * FROM idem_claim('w-tx', wait_for_outcome => '1 second');
:sqlstate
ROLLBACK;
BEGIN;
SELECT n FROM w_orders WHERE id = 1 FOR UPDATE;
SELECT * FROM idem_claim('w-tx', wait_for_outcome => '1 second');
:sqlstate
ROLLBACK;
-- ... its own claim and unknown outcome included
BEGIN;
SELECT outcome FROM idem_claim('w-own');
SELECT idem_mark_unknown('w-own', '{"provider": "timeout"}');
SELECT * FROM idem_claim('w-own', wait_for_outcome => '1 second');
:sqlstate
ROLLBACK;
-- before its first write it can
BEGIN;
SELECT outcome FROM idem_claim('w-tx', wait_for_outcome => '1 second');
SELECT idem_finish('w-tx', '{}');
COMMIT;

-- a transaction snapshot could never see the outcome
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM idem_claim('w-rr', wait_for_outcome => '1 second');
:sqlstate
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT * FROM idem_claim('w-rr', wait_for_outcome => '1 second');
:sqlstate
ROLLBACK;

DROP TABLE w_orders;
TRUNCATE idempotent_record;
