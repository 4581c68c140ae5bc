-- idem_claim outcomes (in-transaction mode)
-- Each error is followed by its SQLSTATE.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;

-- a new key is claimed with fence 1; the claim commits with its outcome
BEGIN;
SELECT outcome, status, result, fence, recovery_point, retry_after
  FROM idem_claim('ord-1', scope => 'acct_42',
                  fingerprint => idem_fingerprint('{"sku": 7, "qty": 1}'));
SELECT idem_finish('ord-1', '{"order_id": 1001}', scope => 'acct_42');
COMMIT;

-- a duplicate replays the stored result and writes nothing
SELECT updated_at AS before_replay FROM idempotent_record WHERE key = 'ord-1' \gset
SELECT outcome, status, result, fence
  FROM idem_claim('ord-1', scope => 'acct_42',
                  fingerprint => idem_fingerprint('{"qty": 1, "sku": 7.0}'));
SELECT updated_at = :'before_replay' AS unchanged FROM idempotent_record WHERE key = 'ord-1';

-- a NULL fingerprint skips the check and replays
SELECT outcome, result FROM idem_claim('ord-1', scope => 'acct_42');

-- the key reused for a different request: IK001, nothing changes
SELECT outcome FROM idem_claim('ord-1', scope => 'acct_42',
                               fingerprint => idem_fingerprint('{"sku": 8, "qty": 1}'));
:sqlstate
SELECT key, status, result, fence FROM idempotent_record ORDER BY scope, key;

-- the same key in another scope is another record
BEGIN;
SELECT outcome, fence FROM idem_claim('ord-1', scope => 'acct_43');
SELECT idem_finish('ord-1', '{"order_id": 2002}', scope => 'acct_43');
COMMIT;
SELECT outcome, result FROM idem_claim('ord-1', scope => 'acct_43');
SELECT outcome, result FROM idem_claim('ord-1', scope => 'acct_42');

-- a record stored without a fingerprint accepts any fingerprint
BEGIN;
SELECT outcome FROM idem_claim('nofp');
SELECT idem_finish('nofp', '"done"');
COMMIT;
SELECT outcome, result FROM idem_claim('nofp', fingerprint => '\x01');

-- claiming a key again in the transaction that holds it: in_progress
BEGIN;
SELECT outcome, status, fence FROM idem_claim('twice');
SELECT outcome, status, fence FROM idem_claim('twice');
SELECT idem_finish('twice', '{}');
-- after its outcome, the same transaction replays it
SELECT outcome, status, result FROM idem_claim('twice');
COMMIT;

-- ... even when its ttl ran out meanwhile: it stays this transaction's
-- claim, and one outcome lets the transaction commit
BEGIN;
SELECT outcome, fence FROM idem_claim('own-expired', ttl => '1 second');
UPDATE idempotent_record SET expires_at = now() - interval '1 second' WHERE key = 'own-expired';
SELECT outcome, status, fence FROM idem_claim('own-expired');
SELECT idem_finish('own-expired', '{"once": true}');
COMMIT;
SELECT status, result, fence FROM idempotent_record WHERE key = 'own-expired';

-- ttl sets expires_at = claim time + ttl (server clock)
BEGIN;
SELECT outcome FROM idem_claim('ttl', ttl => '90 minutes');
SELECT expires_at - created_at AS retention FROM idempotent_record WHERE key = 'ttl';
SELECT idem_finish('ttl', '{}');
COMMIT;
-- without ttl, idempotency.default_ttl (24 hours)
SHOW idempotency.default_ttl;
BEGIN;
SELECT outcome FROM idem_claim('ttl-default');
SELECT idem_finish('ttl-default', '{}');
COMMIT;
-- (recording the outcome restarts the retention: outcome time + ttl)
\i sql/include/kept_until.sql
SELECT pg_temp.kept_until(idempotent_record) - updated_at AS retention FROM idempotent_record WHERE key = 'ttl-default';
SET idempotency.default_ttl = '2h';
BEGIN;
SELECT outcome FROM idem_claim('ttl-guc');
SELECT idem_finish('ttl-guc', '{}');
COMMIT;
SELECT pg_temp.kept_until(idempotent_record) - updated_at AS retention FROM idempotent_record WHERE key = 'ttl-guc';
RESET idempotency.default_ttl;

-- an expired record counts as absent: claimed again with fence + 1,
-- whatever its fingerprint, and reset to a new record
-- (the whole record moved two days back: claimed and recorded then, with
-- its one-day ttl, it is past its retention however long it took)
UPDATE idempotent_record SET created_at = created_at - interval '2 days',
       updated_at = updated_at - interval '2 days', expires_at = expires_at - interval '2 days'
 WHERE scope = 'acct_42' AND key = 'ord-1';
BEGIN;
SELECT outcome, status, result, fence, recovery_point
  FROM idem_claim('ord-1', scope => 'acct_42',
                  fingerprint => idem_fingerprint('{"sku": 9}'));
SELECT status, result, fence, fingerprint = idem_fingerprint('{"sku": 9}') AS new_fingerprint
  FROM idempotent_record WHERE scope = 'acct_42' AND key = 'ord-1';
SELECT idem_finish('ord-1', '{"order_id": 1002}', scope => 'acct_42');
COMMIT;
SELECT outcome, result, fence FROM idem_claim('ord-1', scope => 'acct_42');

-- idem_lookup reads without claiming; expired and absent records: no row
SELECT scope, key, status, result, fence FROM idem_lookup('ord-1', 'acct_42');
SELECT count(*) FROM idem_lookup('absent');
UPDATE idempotent_record SET created_at = created_at - interval '2 days',
       updated_at = updated_at - interval '2 days', expires_at = expires_at - interval '2 days'
 WHERE key = 'nofp';
SELECT count(*) FROM idem_lookup('nofp');
-- ... and a claim takes the expired key over
BEGIN;
SELECT outcome, fence FROM idem_claim('nofp');
SELECT idem_fail('nofp', '{"error": "out of stock"}', retryable => false);
COMMIT;
SELECT outcome, status, result, fence FROM idem_claim('nofp');

-- a committed in_progress record without a live lease has lost its owner:
-- the next claim takes it over with fence + 1 and keeps its recovery point
INSERT INTO idempotent_record (key, status, fence, recovery_point, created_at, updated_at, expires_at)
VALUES ('orphan', 'in_progress', 3, 'charged', now(), now(), now() + interval '1 day');
BEGIN;
SELECT outcome, status, fence, recovery_point FROM idem_claim('orphan');
SELECT idem_finish('orphan', '{"resumed": true}');
COMMIT;
SELECT outcome, status, result, fence FROM idem_claim('orphan');

-- while its lease is live, an in_progress record answers in_progress with
-- retry_after: the time left of a short lease, else idempotency.retry_after;
-- unknown outcomes answer in_progress too, with idempotency.retry_after
INSERT INTO idempotent_record (key, status, fence, locked_until, created_at, updated_at, expires_at)
VALUES ('leased', 'in_progress', 1, now() + interval '1 hour', now(), now(), now() + interval '1 day'),
       ('unsure', 'unknown', 1, NULL, now(), now(), now() + interval '1 day');
SELECT outcome, status, fence, retry_after FROM idem_claim('leased');
SET idempotency.retry_after = '250ms';
SELECT outcome, status, fence, retry_after FROM idem_claim('leased');
SET idempotency.retry_after = '2h';
SELECT outcome, status, fence,
       retry_after > interval '59 minutes' AND retry_after <= interval '1 hour' AS hint_is_lease_left
  FROM idem_claim('leased');
RESET idempotency.retry_after;
SELECT outcome, status, fence, retry_after FROM idem_claim('unsure');

SELECT scope, key, status, result, fence FROM idempotent_record ORDER BY scope, key;
TRUNCATE idempotent_record;
