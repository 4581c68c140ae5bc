-- Late writes (README "Writes after a claim"): a worker whose lease and ttl
-- ran out still holds the current fence as long as nobody reclaimed or
-- took over the key.  Its finish, fail, mark_unknown and checkpoint are
-- recorded, and an outcome restarts retention from the outcome's time, so
-- a retry replays it instead of doing the work twice.  Once another claim
-- took the key, the late write gets IK003 and changes nothing.  Time
-- passing is simulated by moving the record's times two hours back.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;
CREATE FUNCTION pg_temp.age_record(k text) RETURNS void LANGUAGE sql AS $$
    UPDATE idempotent_record
       SET created_at = created_at - interval '2 hours',
           updated_at = updated_at - interval '2 hours',
           expires_at = expires_at - interval '2 hours',
           locked_until = locked_until - interval '2 hours'
     WHERE key = k $$;
\i sql/include/kept_until.sql
CREATE VIEW pg_temp.late AS
SELECT key, status, result, recovery_point, fence,
       pg_temp.kept_until(idempotent_record) > clock_timestamp() AS retained,
       pg_temp.kept_until(idempotent_record) - updated_at >= interval '1 hour' AS retained_for_the_ttl
  FROM idempotent_record;

-- leased claims with a one-hour ttl and a one-minute lease, two hours ago
SELECT k, outcome, fence
  FROM unnest(ARRAY['late-finish', 'late-fail', 'late-unknown', 'late-checkpoint',
                    'late-retry', 'late-taken', 'late-again', 'late-nofence']) AS k,
       LATERAL idem_claim(k, ttl => '1 hour', lease => '1 minute');
SELECT pg_temp.age_record(key) FROM idempotent_record;
-- expired: a lookup sees nothing
SELECT count(*) AS visible FROM idem_lookup('late-finish');

-- each late outcome is recorded, retained for a ttl from now, and replayed
SELECT idem_finish('late-finish', '{"charge": "ch_1"}', fence => 1);
SELECT idem_fail('late-fail', '{"error": "card declined"}', retryable => false, fence => 1);
SELECT idem_mark_unknown('late-unknown', '{"timeout": true}', fence => 1);
SELECT * FROM pg_temp.late WHERE key IN ('late-finish', 'late-fail', 'late-unknown') ORDER BY key;
SELECT k, outcome, status, result, fence
  FROM unnest(ARRAY['late-finish', 'late-fail', 'late-unknown']) AS k,
       LATERAL idem_claim(k, lease => '1 minute') ORDER BY k;
-- the reconciler may still record the unknown outcome with the same fence
SELECT idem_finish('late-unknown', '{"charge": "ch_2"}', fence => 1);
SELECT outcome, status, result FROM idem_claim('late-unknown');

-- a late checkpoint is saved too; the record stays expired until the late
-- worker records its outcome
SELECT idem_checkpoint('late-checkpoint', 'charged', fence => 1);
SELECT * FROM pg_temp.late WHERE key = 'late-checkpoint';
SELECT idem_finish('late-checkpoint', '{"charge": "ch_3"}', fence => 1);
SELECT outcome, result, recovery_point FROM idem_claim('late-checkpoint');

-- a late retryable failure releases the key; the record is still expired,
-- so the retry claims it as a new record (fence + 1, nothing kept)
SELECT idem_fail('late-retry', '{"error": "provider 503"}', retryable => true, fence => 1);
SELECT outcome, status, result, fence, recovery_point FROM idem_claim('late-retry', lease => '1 minute');

-- another claim took the key (the expired record was reclaimed): IK003
SELECT outcome, fence FROM idem_claim('late-taken', lease => '1 minute');
SELECT idem_finish('late-taken', '{"by": "late worker"}', fence => 1);
:sqlstate
SELECT idem_checkpoint('late-taken', 'by late worker', fence => 1);
:sqlstate
SELECT key, status, result, recovery_point, fence FROM idempotent_record WHERE key = 'late-taken';

-- ... also when the newer claim has expired in turn: the older fence is
-- still stale, the newer one is current
SELECT outcome, fence FROM idem_claim('late-again', ttl => '1 hour', lease => '1 minute');
SELECT pg_temp.age_record('late-again');
SELECT idem_fail('late-again', '{"by": "first worker"}', retryable => false, fence => 1);
:sqlstate
SELECT idem_finish('late-again', '{"by": "second worker"}', fence => 2);
SELECT outcome, result, fence FROM idem_claim('late-again');

-- a late write to a leased claim still needs its fence
SELECT idem_finish('late-nofence', '{"by": "anyone"}');
:sqlstate
SELECT idem_finish('late-nofence', '{"by": "worker"}', fence => 1);

-- a purged record is gone: the late write has nothing to write to (IK002)
SELECT outcome FROM idem_claim('late-purged', ttl => '1 hour', lease => '1 minute');
SELECT pg_temp.age_record('late-purged');
SELECT idem_purge(100) AS purged;
SELECT idem_finish('late-purged', '{"by": "late worker"}', fence => 1);
:sqlstate

-- an in-transaction claim whose ttl runs out before its transaction ends:
-- nobody else can claim the key meanwhile (they wait for the transaction),
-- and the outcome is recorded and retained
BEGIN;
SELECT outcome, fence FROM idem_claim('late-in-tx', ttl => '1 hour');
SELECT pg_temp.age_record('late-in-tx');
SELECT idem_finish('late-in-tx', '{"order": 7}');
COMMIT;
SELECT * FROM pg_temp.late WHERE key = 'late-in-tx';
SELECT outcome, result FROM idem_claim('late-in-tx');
BEGIN;
SELECT outcome, fence FROM idem_claim('late-in-tx-checkpoint', ttl => '1 hour');
SELECT pg_temp.age_record('late-in-tx-checkpoint');
SELECT idem_checkpoint('late-in-tx-checkpoint', 'phase 1');
SELECT idem_fail('late-in-tx-checkpoint', '{"error": "out of stock"}', retryable => false);
COMMIT;
SELECT outcome, result, recovery_point FROM idem_claim('late-in-tx-checkpoint');

TRUNCATE idempotent_record;
