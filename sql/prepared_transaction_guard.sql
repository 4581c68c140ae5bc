-- The commit guard at PREPARE TRANSACTION (needs max_prepared_transactions
-- > 0): a prepared transaction cannot hold an unfinished claim either
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;

-- refused with IK004, the transaction rolled back whole
BEGIN;
SELECT outcome FROM idem_claim('g4');
PREPARE TRANSACTION 'idem_guard';
:sqlstate
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid = 'idem_guard';
-- with the outcome recorded it prepares and commits
BEGIN;
SELECT outcome FROM idem_claim('g4');
SELECT idem_finish('g4', '{"prepared": true}');
PREPARE TRANSACTION 'idem_guard';
COMMIT PREPARED 'idem_guard';
SELECT outcome, result FROM idem_claim('g4');

TRUNCATE idempotent_record;
