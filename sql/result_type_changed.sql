-- idem_claim keeps its result row type for the backend's life.  A change
-- to the type's columns (ALTER TYPE ... ATTRIBUTE, which only its owner,
-- the extension's, can make) is seen at the next call: columns of other
-- types are refused with 42804, never filled by position; once the type is
-- as installed again, the same session claims as before.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;
BEGIN;
SELECT outcome FROM idem_claim('result-type-1');
SELECT idem_finish('result-type-1', '{}');
ALTER TYPE idem_claim_result ALTER ATTRIBUTE fence TYPE text;
SELECT outcome FROM idem_claim('result-type-2');
:sqlstate
ROLLBACK;
BEGIN;
ALTER TYPE idem_claim_result ADD ATTRIBUTE extra integer;
SELECT outcome FROM idem_claim('result-type-3');
:sqlstate
ROLLBACK;
-- the rolled-back changes are forgotten: the type as installed again
BEGIN;
SELECT outcome, fence FROM idem_claim('result-type-4');
SELECT idem_finish('result-type-4', '{"n": 4}');
COMMIT;
SELECT outcome, result FROM idem_claim('result-type-4');
TRUNCATE idempotent_record;
