-- outcomes.sql — what idem_claim answers, what idem_finish,
-- idem_fail and idem_lookup do to the record, the scope as part of the
-- identity (the canonical rules of idem_fingerprint: sql/fingerprint.sql).
-- Everything runs in one transaction; records "of other transactions" are
-- simulated with plain INSERTs into idempotent_record.
BEGIN;
SELECT plan(80);

-------------------------------------------------------------------------------
-- claimed → finish → replay
-------------------------------------------------------------------------------
SELECT is((SELECT count(*) FROM idem_lookup('out-1', scope => 'acct_42')), 0::bigint,
    'out-1: idem_lookup finds nothing before the first claim');
SELECT results_eq(
    $$SELECT outcome, status, result, fence, recovery_point, retry_after
        FROM idem_claim('out-1', scope => 'acct_42',
                        fingerprint => idem_fingerprint('{"sku": 7, "qty": 1}'))$$,
    $$VALUES ('claimed'::text, 'in_progress'::idem_status, NULL::jsonb, 1::bigint, NULL::text, NULL::interval)$$,
    'out-1: the first claim is claimed, in_progress, fence 1, no result, no recovery point, no retry hint');
SELECT results_eq(
    $$SELECT scope, key, status, fingerprint, result, recovery_point, fence, locked_until
        FROM idem_lookup('out-1', scope => 'acct_42')$$,
    $$VALUES ('acct_42'::text, 'out-1'::text, 'in_progress'::idem_status,
              idem_fingerprint('{"sku": 7, "qty": 1}'), NULL::jsonb, NULL::text, 1::bigint, NULL::timestamptz)$$,
    'out-1: the claimed record is in_progress with the fingerprint, fence 1 and no lease (in-transaction claim)');
SELECT ok((SELECT created_at = updated_at AND updated_at <= clock_timestamp()
             FROM idem_lookup('out-1', scope => 'acct_42')),
    'out-1: created_at = updated_at, both server time of the claim');
SELECT is((SELECT expires_at - created_at FROM idem_lookup('out-1', scope => 'acct_42')), interval '24 hours',
    'out-1: without a ttl the record is kept idempotency.default_ttl (24 hours)');
SELECT results_eq(
    $$SELECT outcome, status, fence FROM idem_claim('out-1', scope => 'acct_42',
                                                     fingerprint => idem_fingerprint('{"sku": 7, "qty": 1}'))$$,
    $$VALUES ('in_progress'::text, 'in_progress'::idem_status, 1::bigint)$$,
    'out-1: claiming again the key this transaction holds open answers in_progress');

SELECT lives_ok($$SELECT idem_finish('out-1', '{"order_id": 1001}', scope => 'acct_42')$$,
    'out-1: idem_finish records the result');
SELECT results_eq(
    $$SELECT status, result, fence, locked_until FROM idem_lookup('out-1', scope => 'acct_42')$$,
    $$VALUES ('succeeded'::idem_status, '{"order_id": 1001}'::jsonb, 1::bigint, NULL::timestamptz)$$,
    'out-1: after idem_finish the record is succeeded with the result, same fence');
SELECT ok((SELECT updated_at >= created_at FROM idem_lookup('out-1', scope => 'acct_42')),
    'out-1: updated_at is not before created_at after idem_finish');

CREATE TEMP TABLE snap_out1 AS SELECT * FROM idempotent_record;
SELECT results_eq(
    $$SELECT outcome, status, result, fence, recovery_point, retry_after
        FROM idem_claim('out-1', scope => 'acct_42',
                        fingerprint => idem_fingerprint('{"sku": 7, "qty": 1}'))$$,
    $$VALUES ('replay'::text, 'succeeded'::idem_status, '{"order_id": 1001}'::jsonb, 1::bigint, NULL::text, NULL::interval)$$,
    'out-1: a duplicate with the same fingerprint gets replay with the stored result');
SELECT results_eq(
    $$SELECT outcome, result FROM idem_claim('out-1', scope => 'acct_42',
                                             fingerprint => idem_fingerprint('{ "qty" : 1.0, "sku" : 7 }'))$$,
    $$VALUES ('replay'::text, '{"order_id": 1001}'::jsonb)$$,
    'out-1: a duplicate with the same body spelled differently gets replay');
SELECT results_eq(
    $$SELECT outcome, result FROM idem_claim('out-1', scope => 'acct_42')$$,
    $$VALUES ('replay'::text, '{"order_id": 1001}'::jsonb)$$,
    'out-1: a duplicate without a fingerprint gets replay (nothing to compare)');
SELECT results_eq(
    $$SELECT outcome, result FROM idem_claim('out-1', scope => 'acct_42', wait => false)$$,
    $$VALUES ('replay'::text, '{"order_id": 1001}'::jsonb)$$,
    'out-1: a duplicate with wait => false gets replay');
SELECT results_eq(
    $$SELECT outcome, result FROM idem_claim('out-1', scope => 'acct_42', ttl => '1 hour')$$,
    $$VALUES ('replay'::text, '{"order_id": 1001}'::jsonb)$$,
    'out-1: a duplicate with another ttl gets replay');
SELECT set_eq('TABLE idempotent_record', 'TABLE snap_out1',
    'out-1: replays write nothing (the record and its timestamps are unchanged)');

-- a record stored without a fingerprint accepts any (README: never checked)
SELECT is((SELECT outcome FROM idem_claim('out-1-nofp')), 'claimed',
    'out-1-nofp: claimed without a fingerprint');
SELECT lives_ok($$SELECT idem_finish('out-1-nofp', '{"n": 1}')$$,
    'out-1-nofp: finished');
SELECT results_eq(
    $$SELECT outcome, result FROM idem_claim('out-1-nofp', fingerprint => idem_fingerprint('{"any": "body"}'))$$,
    $$VALUES ('replay'::text, '{"n": 1}'::jsonb)$$,
    'out-1-nofp: a duplicate with a fingerprint gets replay when none was stored');

-------------------------------------------------------------------------------
-- final fail → replay of the stored error
-------------------------------------------------------------------------------
SELECT is((SELECT outcome FROM idem_claim('out-2')), 'claimed',
    'out-2: claimed');
SELECT lives_ok(
    $$SELECT idem_fail('out-2', '{"code": "card_declined", "detail": {"decline_code": "insufficient_funds", "amount": 12.50}, "retry": false}', retryable => false)$$,
    'out-2: idem_fail with retryable => false records the error');
SELECT results_eq(
    $$SELECT status, result, fence FROM idem_lookup('out-2')$$,
    $$VALUES ('failed'::idem_status, '{"code": "card_declined", "detail": {"decline_code": "insufficient_funds", "amount": 12.50}, "retry": false}'::jsonb, 1::bigint)$$,
    'out-2: the record is failed with the error as result');
SELECT results_eq(
    $$SELECT outcome, status, result, fence, recovery_point, retry_after FROM idem_claim('out-2')$$,
    $$VALUES ('replay'::text, 'failed'::idem_status,
              '{"code": "card_declined", "detail": {"decline_code": "insufficient_funds", "amount": 12.50}, "retry": false}'::jsonb,
              1::bigint, NULL::text, NULL::interval)$$,
    'out-2: a duplicate gets replay with status failed and the error');
SELECT is((SELECT result::text FROM idem_claim('out-2')),
    '{"code": "card_declined", "retry": false, "detail": {"amount": 12.50, "decline_code": "insufficient_funds"}}',
    'out-2: the replayed error is the exact jsonb given (numeric scale 12.50 kept)');

-------------------------------------------------------------------------------
-- retryable fail → the key is released; the retry takes it over (fence 2)
-------------------------------------------------------------------------------
SELECT results_eq(
    $$SELECT outcome, fence FROM idem_claim('out-3', fingerprint => idem_fingerprint('{"n": 3}'))$$,
    $$VALUES ('claimed'::text, 1::bigint)$$,
    'out-3: claimed with fence 1');
SELECT lives_ok($$SELECT idem_fail('out-3', '{"error": "upstream timeout"}')$$,
    'out-3: idem_fail is retryable by default');
SELECT results_eq(
    $$SELECT status, result, fence, locked_until IS NOT NULL FROM idem_lookup('out-3')$$,
    $$VALUES ('in_progress'::idem_status, '{"error": "upstream timeout"}'::jsonb, 1::bigint, true)$$,
    'out-3: a retryable failure leaves the record as a claim whose lease has ended, the error as its reason');
SELECT is((SELECT count(*) FROM idempotent_record WHERE key = 'out-3'), 1::bigint,
    'out-3: the row stays, so its fence keeps growing');
SELECT results_eq(
    $$SELECT outcome, status, result, fence, recovery_point, retry_after
        FROM idem_claim('out-3', fingerprint => idem_fingerprint('{"n": 3}'))$$,
    $$VALUES ('claimed'::text, 'in_progress'::idem_status, '{"error": "upstream timeout"}'::jsonb, 2::bigint, NULL::text, NULL::interval)$$,
    'out-3: the retry takes the key over, fence 2, told why the last attempt failed');
SELECT lives_ok($$SELECT idem_finish('out-3', '{"ok": true}')$$,
    'out-3: the retry can be finished');
SELECT results_eq(
    $$SELECT outcome, status, result, fence FROM idem_claim('out-3', fingerprint => idem_fingerprint('{"n": 3}'))$$,
    $$VALUES ('replay'::text, 'succeeded'::idem_status, '{"ok": true}'::jsonb, 2::bigint)$$,
    'out-3: after the retry succeeded, duplicates replay its result');

-------------------------------------------------------------------------------
-- expired record → claimed with fence 2, no fingerprint check
-------------------------------------------------------------------------------
SELECT is((SELECT outcome FROM idem_claim('out-4', fingerprint => idem_fingerprint('{"v": "first"}'))), 'claimed',
    'out-4: claimed');
SELECT lives_ok($$SELECT idem_finish('out-4', '{"v": 1}')$$,
    'out-4: finished');
UPDATE idempotent_record SET created_at = clock_timestamp() - interval '2 days',
                             updated_at = clock_timestamp() - interval '2 days',
                             expires_at = clock_timestamp() - interval '1 day'
 WHERE scope = '' AND key = 'out-4';
SELECT is((SELECT count(*) FROM idem_lookup('out-4')), 0::bigint,
    'out-4: idem_lookup treats the expired record as absent');
SELECT results_eq(
    $$SELECT outcome, status, result, fence, recovery_point, retry_after
        FROM idem_claim('out-4', fingerprint => idem_fingerprint('{"v": "second"}'), ttl => '1 hour')$$,
    $$VALUES ('claimed'::text, 'in_progress'::idem_status, NULL::jsonb, 2::bigint, NULL::text, NULL::interval)$$,
    'out-4: an expired record is claimed again with fence 2, without a fingerprint check');
SELECT results_eq(
    $$SELECT status, fingerprint, result, recovery_point, fence, locked_until FROM idem_lookup('out-4')$$,
    $$VALUES ('in_progress'::idem_status, idem_fingerprint('{"v": "second"}'), NULL::jsonb, NULL::text, 2::bigint, NULL::timestamptz)$$,
    'out-4: the reclaimed record is reset: new fingerprint, no result, fence 2');
SELECT ok((SELECT created_at = updated_at AND expires_at - created_at = interval '1 hour'
             FROM idem_lookup('out-4')),
    'out-4: the reclaimed record has new timestamps and the new ttl');
SELECT lives_ok($$SELECT idem_finish('out-4', '{"v": 2}')$$,
    'out-4: the new claim can be finished');
SELECT results_eq(
    $$SELECT outcome, result, fence FROM idem_claim('out-4', fingerprint => idem_fingerprint('{"v": "second"}'))$$,
    $$VALUES ('replay'::text, '{"v": 2}'::jsonb, 2::bigint)$$,
    'out-4: duplicates now replay the second result with fence 2');

-- an expired final failure is claimed again as well
SELECT is((SELECT outcome FROM idem_claim('out-4f')), 'claimed',
    'out-4f: claimed');
SELECT lives_ok($$SELECT idem_fail('out-4f', '{"e": 1}', retryable => false)$$,
    'out-4f: failed for good');
UPDATE idempotent_record SET created_at = clock_timestamp() - interval '2 days',
                             updated_at = clock_timestamp() - interval '2 days',
                             expires_at = clock_timestamp() - interval '1 day'
 WHERE scope = '' AND key = 'out-4f';
SELECT results_eq(
    $$SELECT outcome, status, result, fence FROM idem_claim('out-4f')$$,
    $$VALUES ('claimed'::text, 'in_progress'::idem_status, NULL::jsonb, 2::bigint)$$,
    'out-4f: an expired failed record is claimed again with fence 2');
SELECT lives_ok($$SELECT idem_finish('out-4f', '{}')$$,
    'out-4f: finished');

-- an expired abandoned claim is a new record: its recovery point is dropped
INSERT INTO idempotent_record (scope, key, status, fingerprint, recovery_point, fence,
                               created_at, updated_at, expires_at)
VALUES ('', 'out-4r', 'in_progress', idem_fingerprint('{"a": 1}'), 'step-2', 3,
        clock_timestamp() - interval '2 days', clock_timestamp() - interval '2 days',
        clock_timestamp() - interval '1 day');
SELECT results_eq(
    $$SELECT outcome, status, fence, recovery_point FROM idem_claim('out-4r', fingerprint => idem_fingerprint('{"a": 2}'))$$,
    $$VALUES ('claimed'::text, 'in_progress'::idem_status, 4::bigint, NULL::text)$$,
    'out-4r: an expired in_progress record is claimed with fence + 1, no recovery point, no fingerprint check');
SELECT lives_ok($$SELECT idem_finish('out-4r', '{}')$$,
    'out-4r: finished');

-------------------------------------------------------------------------------
-- records of other transactions (the outcomes table in the README)
-------------------------------------------------------------------------------
INSERT INTO idempotent_record (scope, key, status, fingerprint, result, recovery_point, fence,
                               locked_until, created_at, updated_at, expires_at)
VALUES ('', 'out-5-unknown', 'unknown', NULL, NULL, 'charged?', 1,
        NULL, clock_timestamp(), clock_timestamp(), clock_timestamp() + interval '1 day'),
       ('', 'out-5-leased', 'in_progress', NULL, NULL, 'step-1', 1,
        clock_timestamp() + interval '1 hour', clock_timestamp(), clock_timestamp(), clock_timestamp() + interval '1 day'),
       ('', 'out-5-lease-over', 'in_progress', idem_fingerprint('{"pay": 9}'), NULL, 'step-2', 1,
        clock_timestamp() - interval '1 second', clock_timestamp(), clock_timestamp(), clock_timestamp() + interval '1 day'),
       ('', 'out-5-abandoned', 'in_progress', NULL, NULL, NULL, 5,
        NULL, clock_timestamp(), clock_timestamp(), clock_timestamp() + interval '1 day');
SELECT results_eq(
    $$SELECT outcome, status, fence FROM idem_claim('out-5-unknown')$$,
    $$VALUES ('in_progress'::text, 'unknown'::idem_status, 1::bigint)$$,
    'a record with status unknown answers in_progress (awaits reconciliation)');
SELECT results_eq(
    $$SELECT outcome, status, fence FROM idem_claim('out-5-leased')$$,
    $$VALUES ('in_progress'::text, 'in_progress'::idem_status, 1::bigint)$$,
    'an in_progress record with a live lease answers in_progress');
SELECT is((SELECT retry_after FROM idem_claim('out-5-leased')),
    current_setting('idempotency.retry_after')::interval,
    'the retry hint of a live lease with longer to run is idempotency.retry_after');
SELECT results_eq(
    $$SELECT outcome, status, fence, recovery_point FROM idem_claim('out-5-lease-over', fingerprint => idem_fingerprint('{"pay": 9}'))$$,
    $$VALUES ('claimed'::text, 'in_progress'::idem_status, 2::bigint, 'step-2'::text)$$,
    'an in_progress record whose lease is over is taken over: claimed, fence + 1, recovery point kept');
SELECT lives_ok($$SELECT idem_finish('out-5-lease-over', '{"charge": "ch_1"}')$$,
    'the taken-over claim can be finished');
SELECT results_eq(
    $$SELECT outcome, status, fence FROM idem_claim('out-5-abandoned')$$,
    $$VALUES ('claimed'::text, 'in_progress'::idem_status, 6::bigint)$$,
    'a committed in_progress record without a lease is taken over with fence + 1');
SELECT lives_ok($$SELECT idem_finish('out-5-abandoned', '{}')$$,
    'the taken-over abandoned claim can be finished');

-------------------------------------------------------------------------------
-- the scope is part of the identity: (scope, key) pairs whose texts run
-- together the same way are four records, each with its own outcome
-------------------------------------------------------------------------------
CREATE TEMP TABLE pairs (scope text, key text);
INSERT INTO pairs VALUES ('a', 'bc'), ('ab', 'c'), ('a', 'b:c'), ('a:b', 'c');
SELECT results_eq(
    $$SELECT p.scope, p.key, c.outcome, c.fence FROM pairs p, LATERAL idem_claim(p.key, scope => p.scope) c ORDER BY 1, 2$$,
    $$SELECT scope, key, 'claimed'::text, 1::bigint FROM pairs ORDER BY 1, 2$$,
    'each (scope, key) of four that run together is claimed as a record of its own');
SELECT lives_ok($$SELECT idem_finish(key, to_jsonb(scope || '/' || key), scope => scope) FROM pairs$$,
    'each of the four is finished with its own result');
SELECT results_eq(
    $$SELECT p.scope, p.key, c.outcome, c.result FROM pairs p, LATERAL idem_claim(p.key, scope => p.scope) c ORDER BY 1, 2$$,
    $$SELECT scope, key, 'replay'::text, to_jsonb(scope || '/' || key) FROM pairs ORDER BY 1, 2$$,
    'each of the four replays its own result');

SELECT results_eq(
    $$SELECT outcome, fence FROM idem_claim('order-1', scope => 'tenant_1')$$,
    $$VALUES ('claimed'::text, 1::bigint)$$,
    'same key in two scopes: claimed in tenant_1');
SELECT results_eq(
    $$SELECT outcome, fence FROM idem_claim('order-1', scope => 'tenant_2')$$,
    $$VALUES ('claimed'::text, 1::bigint)$$,
    'same key in two scopes: claimed in tenant_2 as well');
SELECT results_eq(
    $$SELECT outcome, fence FROM idem_claim('order-1')$$,
    $$VALUES ('claimed'::text, 1::bigint)$$,
    'same key in the default scope '''': claimed as well');
SELECT lives_ok($$SELECT idem_finish('order-1', '{"tenant": 1}', scope => 'tenant_1')$$,
    'same key in two scopes: tenant_1 finished');
SELECT results_eq(
    $$SELECT status FROM idem_lookup('order-1', scope => 'tenant_2')$$,
    $$VALUES ('in_progress'::idem_status)$$,
    'same key in two scopes: finishing tenant_1 leaves tenant_2 in_progress');
SELECT lives_ok($$SELECT idem_fail('order-1', '{"tenant": 2}', false, 'tenant_2')$$,
    'same key in two scopes: tenant_2 failed for good');
SELECT lives_ok($$SELECT idem_fail('order-1', '{}')$$,
    'same key in two scopes: the default scope released');
SELECT results_eq(
    $$SELECT outcome, status, result FROM idem_claim('order-1', scope => 'tenant_1')
      UNION ALL
      SELECT outcome, status, result FROM idem_claim('order-1', scope => 'tenant_2')$$,
    $$VALUES ('replay'::text, 'succeeded'::idem_status, '{"tenant": 1}'::jsonb),
             ('replay', 'failed', '{"tenant": 2}')$$,
    'same key in two scopes: each scope replays its own outcome');
SELECT is((SELECT status FROM idem_lookup('order-1')), 'in_progress'::idem_status,
    'same key in two scopes: the release in the default scope did not touch the others');
SELECT is((SELECT count(*) FROM idem_lookup('order-1', scope => 'tenant_3')), 0::bigint,
    'same key in two scopes: a third scope knows nothing of the key');

-------------------------------------------------------------------------------
-- idem_lookup: 0 rows for absent and expired records, 1 row otherwise
-------------------------------------------------------------------------------
CREATE TEMP TABLE snap_lookup AS SELECT * FROM idempotent_record;
SELECT is((SELECT count(*) FROM idem_lookup('out-absent')), 0::bigint,
    'idem_lookup: 0 rows for an absent key');
SELECT set_eq('TABLE idempotent_record', 'TABLE snap_lookup',
    'idem_lookup: looking up an absent key writes nothing (it does not claim)');
SELECT is((SELECT outcome FROM idem_claim('out-absent')), 'claimed',
    'idem_lookup: the looked-up key is still free to claim');
SELECT is((SELECT count(*) FROM idem_lookup('out-absent')), 1::bigint,
    'idem_lookup: 1 row for an in_progress record');
SELECT lives_ok($$SELECT idem_finish('out-absent', '{}')$$,
    'idem_lookup: setup, out-absent finished');
SELECT is((SELECT count(*) FROM idem_lookup('out-absent')), 1::bigint,
    'idem_lookup: 1 row for a succeeded record');
SELECT is((SELECT count(*) FROM idem_lookup('out-2')), 1::bigint,
    'idem_lookup: 1 row for a failed record');
SELECT is((SELECT count(*) FROM idem_lookup('out-5-unknown')), 1::bigint,
    'idem_lookup: 1 row for an unknown record');
SELECT results_eq(
    $$SELECT * FROM idem_lookup('bc', scope => 'a')$$,
    $$SELECT * FROM idempotent_record WHERE scope = 'a' AND key = 'bc'$$,
    'idem_lookup: the row is the record, every column');
UPDATE idempotent_record SET created_at = clock_timestamp() - interval '2 days',
                             updated_at = clock_timestamp() - interval '2 days',
                             expires_at = clock_timestamp() - interval '1 day'
 WHERE scope = '' AND key = 'out-absent';
SELECT is((SELECT count(*) FROM idem_lookup('out-absent')), 0::bigint,
    'idem_lookup: 0 rows for an expired record');
SELECT is((SELECT count(*) FROM idempotent_record WHERE key = 'out-absent'), 1::bigint,
    'idem_lookup: the expired record is still in the table (purge removes it)');

-------------------------------------------------------------------------------
-- ttl and idempotency.default_ttl
-------------------------------------------------------------------------------
SELECT is((SELECT outcome FROM idem_claim('out-ttl', ttl => '90 minutes')), 'claimed',
    'ttl: out-ttl claimed with ttl 90 minutes');
SELECT is((SELECT expires_at - created_at FROM idem_lookup('out-ttl')), interval '90 minutes',
    'ttl: expires_at is claim time + ttl');
SET LOCAL idempotency.default_ttl = '2h';
SELECT is((SELECT outcome FROM idem_claim('out-default-ttl')), 'claimed',
    'ttl: out-default-ttl claimed without a ttl');
SELECT is((SELECT expires_at - created_at FROM idem_lookup('out-default-ttl')), interval '2 hours',
    'ttl: without a ttl, expires_at is claim time + idempotency.default_ttl');
RESET idempotency.default_ttl;
SELECT lives_ok($$SELECT idem_finish('out-ttl', '{}'), idem_finish('out-default-ttl', '{}')$$,
    'ttl: setup, both finished');

SELECT * FROM finish();
ROLLBACK;
