-- Scenarios from real failures of other idempotency
-- systems) that run in one session; the concurrent ones are isolation
-- specs named after their case under test/specs.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;

-- case_04_aborted_claim_leaves_no_trace
BEGIN;
SELECT outcome FROM idem_claim('k4');
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT outcome FROM idem_claim('k4');
ROLLBACK TO s;
COMMIT;
BEGIN;
SELECT outcome, fence FROM idem_claim('k4');
SELECT idem_finish('k4', '{"done": 4}');
COMMIT;

-- case_05_no_session_lock_outlives_a_call
SELECT outcome FROM idem_claim('k4');
SELECT locktype, mode FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype IN ('advisory', 'tuple', 'transactionid');

-- case_09_failure_kinds_are_explicit and
-- case_19_retryable_not_cached_final_replays_exactly
BEGIN;
SELECT outcome FROM idem_claim('k9-retry');
SELECT idem_fail('k9-retry', '{"error": "gateway timeout"}', retryable => true);
COMMIT;
BEGIN;
SELECT outcome, fence FROM idem_claim('k9-retry');
SELECT idem_fail('k9-retry', '{"error": "gateway timeout"}', retryable => true);
COMMIT;
BEGIN;
SELECT outcome FROM idem_claim('k9-final');
SELECT idem_fail('k9-final', '{"error": {"code": 402, "msg": "declined"}, "retry": false}', retryable => false);
COMMIT;
SELECT outcome, status, result FROM idem_claim('k9-final');
SELECT result = '{"error": {"code": 402, "msg": "declined"}, "retry": false}'::jsonb AS same_jsonb,
       status = 'failed' AS same_status
  FROM idem_claim('k9-final');

-- case_11_non_owner_cannot_release_the_key (in-transaction form: only the
-- transaction holding the claim may record an outcome; the leased form
-- with fences comes with leases)
BEGIN;
SELECT outcome FROM idem_claim('k11', fingerprint => idem_fingerprint('{"a": 1}'));
SELECT idem_finish('k11', '{"owner": true}');
COMMIT;
SELECT idem_fail('k11', '{"error": "not mine"}');
:sqlstate
SELECT outcome FROM idem_claim('k11', fingerprint => idem_fingerprint('{"a": 2}'));
:sqlstate
SELECT outcome, status, result FROM idem_claim('k11');

-- case_14_fingerprints_are_canonical
SELECT idem_fingerprint('{"a":1,"b":2}') = idem_fingerprint('{"b":2,"a":1}') AS key_order,
       idem_fingerprint('{"a":1}') = idem_fingerprint('{"a":1.0}')
   AND idem_fingerprint('{"a":1}') = idem_fingerprint('{"a":1e0}')
   AND idem_fingerprint('{"a":1}') = idem_fingerprint('{"a":1.00}') AS numbers,
       idem_fingerprint('{"a":"1"}') <> idem_fingerprint('{"a":1}') AS types,
       idem_fingerprint('{"a":[1,2]}') <> idem_fingerprint('{"a":[2,1]}') AS array_order,
       idem_fingerprint('{"n":{"x":1,"y":2}}') = idem_fingerprint('{"n":{"y":2.0,"x":1}}') AS nested;

-- case_15_fingerprint_checked_on_every_path (finished, leased in progress,
-- unknown; the uncommitted path is an isolation spec)
BEGIN;
SELECT outcome FROM idem_claim('k15', fingerprint => idem_fingerprint('{"v": "A"}'));
SELECT idem_finish('k15', '{"r": "A"}');
COMMIT;
SELECT outcome FROM idem_claim('k15', fingerprint => idem_fingerprint('{"v": "B"}'));
:sqlstate
INSERT INTO idempotent_record (key, status, fingerprint, locked_until, created_at, updated_at, expires_at)
VALUES ('k15-leased', 'in_progress', idem_fingerprint('{"v": "A"}'), now() + interval '1 hour', now(), now(), now() + interval '1 day'),
       ('k15-unknown', 'unknown', idem_fingerprint('{"v": "A"}'), NULL, now(), now(), now() + interval '1 day');
SELECT outcome FROM idem_claim('k15-leased', fingerprint => idem_fingerprint('{"v": "B"}'));
:sqlstate
SELECT outcome FROM idem_claim('k15-unknown', fingerprint => idem_fingerprint('{"v": "B"}'));
:sqlstate
-- a NULL fingerprint skips the check (documented)
SELECT outcome, result FROM idem_claim('k15');
SELECT outcome FROM idem_claim('k15-leased');
-- the rejected requests deleted and changed nothing
SELECT key, status, result, fence FROM idempotent_record WHERE key LIKE 'k15%' ORDER BY key;

-- case_18_scope_is_part_of_the_identity
BEGIN;
SELECT outcome FROM idem_claim('abc', scope => 'create_project');
SELECT idem_finish('abc', '{"project": 1}', scope => 'create_project');
COMMIT;
BEGIN;
SELECT outcome FROM idem_claim('abc', scope => 'create_application');
SELECT idem_finish('abc', '{"application": 1}', scope => 'create_application');
SELECT outcome FROM idem_claim('bc', scope => 'a');
SELECT outcome FROM idem_claim('c', scope => 'ab');
SELECT idem_finish('bc', '"a/bc"', scope => 'a');
SELECT idem_finish('c', '"ab/c"', scope => 'ab');
COMMIT;
SELECT scope, key, result FROM idempotent_record
 WHERE key IN ('abc', 'bc', 'c') ORDER BY scope, key;

TRUNCATE idempotent_record;
