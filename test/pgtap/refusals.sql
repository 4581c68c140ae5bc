-- refusals.sql — what a refused call leaves behind: a key reused for a
-- different request (IK001), an outcome for a claim this transaction does
-- not hold or that already has its outcome (IK002), a NULL outcome (22004).
-- Each is refused with its SQLSTATE, changes no record, and leaves an open
-- claim open.  The messages, and every bad argument of every function,
-- are in the pg_regress suite (sql/bad_input.sql); IK004 (COMMIT with an
-- unfinished claim) is raised at COMMIT, which a suite running in one
-- transaction cannot reach (sql/commit_guard.sql, the isolation specs).
BEGIN;
SELECT plan(31);

-- records in every state: finished, failed for good, released by a
-- retryable failure, finished by another transaction (a plain INSERT), and
-- two claims this transaction holds open
DO $$
BEGIN
    PERFORM idem_claim('ref-done', fingerprint => idem_fingerprint('{"sku": 7, "qty": 1}'));
    PERFORM idem_finish('ref-done', '{"order_id": 1001}');
    PERFORM idem_claim('ref-declined', fingerprint => idem_fingerprint('{"a": 1}'));
    PERFORM idem_fail('ref-declined', '{"e": "final"}', retryable => false);
    PERFORM idem_claim('ref-released');
    PERFORM idem_fail('ref-released', '{"e": "retry"}');
    INSERT INTO idempotent_record (scope, key, status, result, fence, created_at, updated_at, expires_at)
    VALUES ('', 'ref-theirs', 'succeeded', '{"order_id": 7}', 1,
            clock_timestamp(), clock_timestamp(), clock_timestamp() + interval '1 day');
    PERFORM idem_claim('ref-held', fingerprint => idem_fingerprint('{"n": 1}'));
    PERFORM idem_claim('ref-scoped', scope => 'a');
END $$;
CREATE TEMP TABLE snap AS SELECT * FROM idempotent_record;

SELECT throws_ok(call, code, NULL, what) FROM (VALUES
    -- IK001: the key was used for another request, whatever its state
    ($$SELECT idem_claim('ref-done', fingerprint => idem_fingerprint('{"sku": 7, "qty": 2}'))$$, 'IK001',
     'IK001: a different fingerprint for a succeeded key'),
    ($$SELECT idem_claim('ref-done', fingerprint => '\x00'::bytea)$$, 'IK001',
     'IK001: any other fingerprint bytes'),
    ($$SELECT idem_claim('ref-done', fingerprint => idem_fingerprint('{"sku": 7, "qty": 2}'), wait => false)$$, 'IK001',
     'IK001 with wait => false too'),
    ($$SELECT idem_claim('ref-done', fingerprint => idem_fingerprint('{"sku": 7, "qty": 2}'), ttl => '1 hour')$$, 'IK001',
     'IK001 whatever the ttl'),
    ($$SELECT idem_claim('ref-declined', fingerprint => idem_fingerprint('{"a": 2}'))$$, 'IK001',
     'IK001: a different fingerprint for a failed key'),
    ($$SELECT idem_claim('ref-held', fingerprint => idem_fingerprint('{"n": 2}'))$$, 'IK001',
     'IK001: a different fingerprint for a claim this transaction holds open'),
    -- IK002: no claim held
    ($$SELECT idem_finish('ref-never', '{}')$$, 'IK002',
     'IK002: idem_finish of a key never claimed'),
    ($$SELECT idem_fail('ref-never', '{}')$$, 'IK002',
     'IK002: idem_fail (retryable) of a key never claimed'),
    ($$SELECT idem_fail('ref-never', '{}', retryable => false)$$, 'IK002',
     'IK002: idem_fail (final) of a key never claimed'),
    ($$SELECT idem_finish('ref-theirs', '{"order_id": 8}')$$, 'IK002',
     'IK002: idem_finish of a key another transaction finished'),
    ($$SELECT idem_fail('ref-theirs', '{}', false)$$, 'IK002',
     'IK002: idem_fail of a key another transaction finished'),
    ($$SELECT idem_finish('ref-scoped', '{}', scope => 'b')$$, 'IK002',
     'IK002: idem_finish in another scope than the claim'),
    ($$SELECT idem_finish('ref-scoped', '{}')$$, 'IK002',
     'IK002: idem_finish in the default scope of a key claimed in scope a'),
    -- IK002: one outcome per claim
    ($$SELECT idem_finish('ref-done', '{"order_id": 2}')$$, 'IK002',
     'IK002: a second idem_finish'),
    ($$SELECT idem_fail('ref-done', '{}', retryable => false)$$, 'IK002',
     'IK002: idem_fail (final) after idem_finish'),
    ($$SELECT idem_fail('ref-done', '{}')$$, 'IK002',
     'IK002: idem_fail (retryable) after idem_finish'),
    ($$SELECT idem_finish('ref-declined', '{}')$$, 'IK002',
     'IK002: idem_finish after a final idem_fail'),
    ($$SELECT idem_fail('ref-declined', '{"e": "again"}', retryable => false)$$, 'IK002',
     'IK002: a second final idem_fail'),
    ($$SELECT idem_finish('ref-released', '{}')$$, 'IK002',
     'IK002: idem_finish after a retryable idem_fail (the key was released)'),
    ($$SELECT idem_fail('ref-released', '{}')$$, 'IK002',
     'IK002: a second retryable idem_fail'),
    -- 22004: a NULL outcome of a held claim
    ($$SELECT idem_finish('ref-held', NULL)$$, '22004',
     '22004: idem_finish of a held claim with a NULL result'),
    ($$SELECT idem_fail('ref-held', NULL, false)$$, '22004',
     '22004: idem_fail of a held claim with a NULL error'),
    ($$SELECT idem_fail('ref-held', '{}', NULL)$$, '22004',
     '22004: idem_fail of a held claim with a NULL retryable')
) AS v(call, code, what);

SELECT set_eq('TABLE idempotent_record', 'TABLE snap',
    'the refused calls changed no record (status, result, fingerprint, fence, timestamps)');
SELECT results_eq(
    $$SELECT key, status, result FROM idempotent_record WHERE key IN ('ref-done', 'ref-declined', 'ref-released') ORDER BY key$$,
    $$VALUES ('ref-declined'::text, 'failed'::idem_status, '{"e": "final"}'::jsonb),
             ('ref-done', 'succeeded', '{"order_id": 1001}'),
             ('ref-released', 'in_progress', '{"e": "retry"}')$$,
    'each record keeps its first outcome (a released claim its reason)');
SELECT lives_ok($$SELECT idem_finish('ref-held', '{"ok": true}'), idem_finish('ref-scoped', '{}', scope => 'a')$$,
    'the claims held open through the refused calls can still be finished');
SELECT is((SELECT count(*) FROM idem_lookup('ref-never')), 0::bigint,
    'the refused outcomes did not create a record for a key never claimed');

-- the fingerprint is compared only within its (scope, key)
SELECT is((SELECT outcome FROM idem_claim('ref-done', scope => 'other', fingerprint => idem_fingerprint('{"sku": 7, "qty": 2}'))),
    'claimed', 'the same key with another fingerprint in another scope is claimed, not IK001');
SELECT lives_ok($$SELECT idem_finish('ref-done', '{}', scope => 'other')$$,
    'setup: ref-done in scope other finished');

-- a claim made in a subtransaction that rolled back is forgotten (no
-- assertion inside the savepoint: rolling back would undo pgTAP's test
-- counter as well)
SAVEPOINT before_claim;
DO $$
BEGIN
    ASSERT (SELECT outcome FROM idem_claim('ref-rolled-back')) = 'claimed';
END
$$;
ROLLBACK TO SAVEPOINT before_claim;
SELECT throws_ok($$SELECT idem_finish('ref-rolled-back', '{}')$$, 'IK002', NULL,
    'IK002: idem_finish of a claim rolled back to a savepoint');
SELECT is((SELECT count(*) FROM idem_lookup('ref-rolled-back')), 0::bigint,
    'the claim rolled back to a savepoint left no record');

SELECT * FROM finish();
ROLLBACK;
