-- A retryable failure keeps its reason (README "idem_fail"): idem_fail(...,
-- retryable => true) releases the key for a retry and keeps the error in
-- the record's result, where idem_lookup, idem_pending (detail) and the
-- retry that takes the key over (idem_claim's result) see it, until the
-- next outcome replaces it.  A record that expired and is claimed as new
-- starts clean.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;

-- a leased worker fails in a way that a retry may fix
SELECT outcome, fence FROM idem_claim('pay-503', lease => '1 minute',
                                      fingerprint => idem_fingerprint('{"amount": 5}'));
SELECT idem_checkpoint('pay-503', 'authorized', fence => 1);
SELECT idem_fail('pay-503', '{"error": "provider 503"}', retryable => true, fence => 1);
SELECT status, result, recovery_point, fence, locked_until <= clock_timestamp() AS released
  FROM idem_lookup('pay-503');
SELECT key, status, detail, recovery_point, fence FROM idem_pending WHERE key = 'pay-503';

-- the retry takes the key over and is told why the last attempt failed
SELECT outcome, status, result, fence, recovery_point
  FROM idem_claim('pay-503', lease => '1 minute', fingerprint => idem_fingerprint('{"amount": 5}'));
-- a duplicate meanwhile: in progress, and the same reason
SELECT outcome, status, result, fence FROM idem_claim('pay-503');
SELECT status, result, fence FROM idem_lookup('pay-503');
-- the next retryable failure replaces the reason, and so does an outcome
SELECT idem_fail('pay-503', '{"error": "provider 502"}', retryable => true, fence => 2);
SELECT outcome, result, fence FROM idem_claim('pay-503', lease => '1 minute');
SELECT idem_finish('pay-503', '{"charge": "ch_1"}', fence => 3);
SELECT outcome, status, result FROM idem_claim('pay-503');

-- a final failure replaces it too, and is replayed as given
SELECT outcome FROM idem_claim('pay-declined', lease => '1 minute');
SELECT idem_fail('pay-declined', '{"error": "timeout"}', retryable => true, fence => 1);
SELECT outcome, result, fence FROM idem_claim('pay-declined', lease => '1 minute');
SELECT idem_fail('pay-declined', '{"error": "card declined"}', retryable => false, fence => 2);
SELECT outcome, status, result FROM idem_claim('pay-declined');

-- an unknown outcome whose reconciliation says "retry": the reason
-- replaces the unknown detail
SELECT outcome FROM idem_claim('pay-unsure', lease => '1 minute');
SELECT idem_mark_unknown('pay-unsure', '{"timeout": "after sending"}', fence => 1);
SELECT idem_fail('pay-unsure', '{"error": "provider has no such charge"}', retryable => true, fence => 1);
SELECT key, status, detail, fence FROM idem_pending WHERE key = 'pay-unsure';
SELECT outcome, result, fence FROM idem_claim('pay-unsure', lease => '1 minute');

-- an in-transaction claim released by a retryable failure: the reason
-- commits with the transaction
BEGIN;
SELECT outcome FROM idem_claim('order-9');
SELECT idem_fail('order-9', '{"error": "inventory service down"}');
COMMIT;
SELECT status, result, fence FROM idem_lookup('order-9');
SELECT outcome, result, fence FROM idem_claim('order-9', lease => '1 minute');

-- a released record whose ttl ran out is claimed as a new one: clean
SELECT outcome FROM idem_claim('pay-old', lease => '1 minute', ttl => '1 hour');
SELECT idem_checkpoint('pay-old', 'authorized', fence => 1);
SELECT idem_fail('pay-old', '{"error": "provider 503"}', retryable => true, fence => 1);
UPDATE idempotent_record SET expires_at = clock_timestamp() - interval '1 second' WHERE key = 'pay-old';
SELECT outcome, status, result, fence, recovery_point FROM idem_claim('pay-old', lease => '1 minute');
SELECT status, result, recovery_point, fence FROM idem_lookup('pay-old');

TRUNCATE idempotent_record;
