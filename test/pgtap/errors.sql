-- errors.sql — the error contract: every refused call raises
-- its SQLSTATE with the documented message and changes nothing.
--   22004  NULL key, scope or required argument (the functions are not STRICT)
--   22023  empty or over-long key or scope, non-positive ttl
--   IK001  key reused with a different fingerprint
--   IK002  finish/fail of a key this transaction does not hold
--   22008  ttl past the timestamp range
-- IK004 (COMMIT with an unfinished claim) is raised at COMMIT, which a pgTAP
-- suite running in one transaction cannot reach; the isolation specs and
-- pg_regress cover it.
BEGIN;
SELECT plan(103);

-- Baseline: whatever is in the table now must still be there, unchanged,
-- after each group of refused calls.
CREATE TEMP TABLE snap_start AS SELECT * FROM idempotent_record;

-------------------------------------------------------------------------------
-- 22004: NULL arguments
-------------------------------------------------------------------------------
SELECT throws_ok($$SELECT * FROM idem_claim(NULL)$$,
    '22004', 'argument "key" of idem_claim must not be null',
    'idem_claim: NULL key raises 22004');
SELECT throws_ok($$SELECT * FROM idem_claim('err-k', scope => NULL)$$,
    '22004', 'argument "scope" of idem_claim must not be null',
    'idem_claim: NULL scope raises 22004');
SELECT throws_ok($$SELECT * FROM idem_claim('err-k', wait => NULL)$$,
    '22004', 'argument "wait" of idem_claim must not be null',
    'idem_claim: NULL wait raises 22004');
SELECT throws_ok($$SELECT * FROM idem_claim(NULL, scope => NULL, fingerprint => NULL, ttl => NULL, wait => NULL)$$,
    '22004', 'argument "key" of idem_claim must not be null',
    'idem_claim: with every argument NULL the key is reported first');

SELECT throws_ok($$SELECT idem_finish(NULL, '{}')$$,
    '22004', 'argument "key" of idem_finish must not be null',
    'idem_finish: NULL key raises 22004');
SELECT throws_ok($$SELECT idem_finish('err-k', NULL)$$,
    '22004', 'argument "result" of idem_finish must not be null',
    'idem_finish: NULL result raises 22004');
SELECT throws_ok($$SELECT idem_finish('err-k', '{}', scope => NULL)$$,
    '22004', 'argument "scope" of idem_finish must not be null',
    'idem_finish: NULL scope raises 22004');

SELECT throws_ok($$SELECT idem_fail(NULL, '{}')$$,
    '22004', 'argument "key" of idem_fail must not be null',
    'idem_fail: NULL key raises 22004');
SELECT throws_ok($$SELECT idem_fail('err-k', NULL)$$,
    '22004', 'argument "error" of idem_fail must not be null',
    'idem_fail: NULL error raises 22004');
SELECT throws_ok($$SELECT idem_fail('err-k', '{}', retryable => NULL)$$,
    '22004', 'argument "retryable" of idem_fail must not be null',
    'idem_fail: NULL retryable raises 22004');
SELECT throws_ok($$SELECT idem_fail('err-k', '{}', scope => NULL)$$,
    '22004', 'argument "scope" of idem_fail must not be null',
    'idem_fail: NULL scope raises 22004');

SELECT throws_ok($$SELECT * FROM idem_lookup(NULL)$$,
    '22004', 'argument "key" of idem_lookup must not be null',
    'idem_lookup: NULL key raises 22004');
SELECT throws_ok($$SELECT * FROM idem_lookup('err-k', scope => NULL)$$,
    '22004', 'argument "scope" of idem_lookup must not be null',
    'idem_lookup: NULL scope raises 22004');

SELECT throws_ok($$SELECT idem_fingerprint(NULL)$$,
    '22004', 'body of idem_fingerprint must not be null',
    'idem_fingerprint: NULL body raises 22004');

SELECT set_eq('TABLE idempotent_record', 'TABLE snap_start',
    'the refused NULL calls changed nothing in idempotent_record');

-- A NULL check refuses the call even when the key is held, and leaves the
-- claim open: the outcome can still be recorded afterwards.
SELECT is((SELECT outcome FROM idem_claim('err-held')), 'claimed',
    'setup: err-held is claimed');
SELECT throws_ok($$SELECT idem_finish('err-held', NULL)$$,
    '22004', 'argument "result" of idem_finish must not be null',
    'idem_finish of a held key with a NULL result raises 22004');
SELECT throws_ok($$SELECT idem_fail('err-held', NULL, false)$$,
    '22004', 'argument "error" of idem_fail must not be null',
    'idem_fail of a held key with a NULL error raises 22004');
SELECT throws_ok($$SELECT idem_fail('err-held', '{}', NULL)$$,
    '22004', 'argument "retryable" of idem_fail must not be null',
    'idem_fail of a held key with a NULL retryable raises 22004');
SELECT results_eq(
    $$SELECT status, result, fence FROM idem_lookup('err-held')$$,
    $$VALUES ('in_progress'::idem_status, NULL::jsonb, 1::bigint)$$,
    'after the refused NULL outcomes err-held is still in_progress with no result');
SELECT lives_ok($$SELECT idem_finish('err-held', '{"ok": true}')$$,
    'the held claim can still be finished after the refused calls');

-- A NULL fingerprint and a NULL ttl are allowed: they mean "none" and
-- "idempotency.default_ttl".
SELECT is((SELECT outcome FROM idem_claim('err-nullable', fingerprint => NULL, ttl => NULL)), 'claimed',
    'idem_claim accepts a NULL fingerprint and a NULL ttl');
SELECT lives_ok($$SELECT idem_finish('err-nullable', '{}')$$,
    'setup: err-nullable finished');

-------------------------------------------------------------------------------
-- 22023: empty and over-long keys and scopes
-------------------------------------------------------------------------------
CREATE TEMP TABLE snap_22023 AS SELECT * FROM idempotent_record;

SELECT throws_ok($$SELECT * FROM idem_claim('')$$,
    '22023', 'idempotency key must not be empty',
    'idem_claim: empty key raises 22023');
SELECT throws_ok($$SELECT * FROM idem_claim('', scope => 'tenant')$$,
    '22023', 'idempotency key must not be empty',
    'idem_claim: empty key raises 22023 in a named scope too');
SELECT throws_ok($$SELECT * FROM idem_claim(repeat('k', 256))$$,
    '22023', 'idempotency key is too long',
    'idem_claim: a key of 256 characters raises 22023 (default limit 255)');
SELECT throws_ok($$SELECT * FROM idem_claim(repeat('é', 256))$$,
    '22023', 'idempotency key is too long',
    'idem_claim: a key of 256 two-byte characters raises 22023');
SELECT throws_ok($$SELECT * FROM idem_claim(repeat('k', 10000))$$,
    '22023', 'idempotency key is too long',
    'idem_claim: a key of 10000 characters raises 22023');
SELECT throws_ok($$SELECT * FROM idem_claim('err-k', scope => repeat('s', 256))$$,
    '22023', 'idempotency scope is too long',
    'idem_claim: a scope of 256 characters raises 22023');
SELECT throws_ok($$SELECT * FROM idem_claim('err-k', scope => repeat('é', 256))$$,
    '22023', 'idempotency scope is too long',
    'idem_claim: a scope of 256 two-byte characters raises 22023');

SELECT throws_ok($$SELECT idem_finish('', '{}')$$,
    '22023', 'idempotency key must not be empty',
    'idem_finish: empty key raises 22023');
SELECT throws_ok($$SELECT idem_finish(repeat('k', 256), '{}')$$,
    '22023', 'idempotency key is too long',
    'idem_finish: over-long key raises 22023');
SELECT throws_ok($$SELECT idem_fail('', '{}')$$,
    '22023', 'idempotency key must not be empty',
    'idem_fail: empty key raises 22023');
SELECT throws_ok($$SELECT idem_fail('err-k', '{}', scope => repeat('s', 256))$$,
    '22023', 'idempotency scope is too long',
    'idem_fail: over-long scope raises 22023');
SELECT throws_ok($$SELECT * FROM idem_lookup('')$$,
    '22023', 'idempotency key must not be empty',
    'idem_lookup: empty key raises 22023');
SELECT throws_ok($$SELECT * FROM idem_lookup(repeat('é', 256))$$,
    '22023', 'idempotency key is too long',
    'idem_lookup: over-long key raises 22023');
SELECT throws_ok($$SELECT * FROM idem_lookup('err-k', scope => repeat('s', 256))$$,
    '22023', 'idempotency scope is too long',
    'idem_lookup: over-long scope raises 22023');

SELECT set_eq('TABLE idempotent_record', 'TABLE snap_22023',
    'the refused empty and over-long keys changed nothing in idempotent_record');

-- The limit is in characters, inclusive: 255 characters are accepted,
-- whatever their byte length.
SELECT is((SELECT outcome FROM idem_claim(repeat('k', 255))), 'claimed',
    'idem_claim: a key of 255 characters is accepted');
SELECT is((SELECT outcome FROM idem_claim(repeat('é', 255))), 'claimed',
    'idem_claim: a key of 255 two-byte characters (510 bytes) is accepted');
SELECT is((SELECT outcome FROM idem_claim(repeat('😀', 255))), 'claimed',
    'idem_claim: a key of 255 four-byte characters (1020 bytes) is accepted');
SELECT is((SELECT outcome FROM idem_claim('err-k', scope => repeat('é', 255))), 'claimed',
    'idem_claim: a scope of 255 two-byte characters is accepted');
SELECT is((SELECT count(*) FROM idem_lookup(repeat('é', 255))), 1::bigint,
    'idem_lookup: a key of 255 two-byte characters is accepted');
SELECT is((SELECT count(*) FROM idempotent_record) - (SELECT count(*) FROM snap_22023), 4::bigint,
    'the four accepted claims wrote four records');
SELECT lives_ok($$SELECT idem_finish(repeat('k', 255), '{}'),
                         idem_finish(repeat('é', 255), '{}'),
                         idem_finish(repeat('😀', 255), '{}'),
                         idem_finish('err-k', '{}', scope => repeat('é', 255))$$,
    'idem_finish accepts keys and scopes of 255 characters');

-- idempotency.max_key_length sets the limit
SET LOCAL idempotency.max_key_length = 8;
SELECT is((SELECT outcome FROM idem_claim('12345678')), 'claimed',
    'with idempotency.max_key_length = 8 a key of 8 characters is accepted');
SELECT throws_ok($$SELECT * FROM idem_claim('123456789')$$,
    '22023', 'idempotency key is too long',
    'with idempotency.max_key_length = 8 a key of 9 characters raises 22023');
SELECT throws_ok($$SELECT * FROM idem_claim('1234', scope => 'éééééééé9')$$,
    '22023', 'idempotency scope is too long',
    'with idempotency.max_key_length = 8 a scope of 9 characters raises 22023');
SELECT lives_ok($$SELECT idem_finish('12345678', '{}')$$,
    'setup: 12345678 finished');
RESET idempotency.max_key_length;
SELECT is(current_setting('idempotency.max_key_length'), '255',
    'idempotency.max_key_length defaults to 255');

-------------------------------------------------------------------------------
-- 22023: non-positive ttl
-------------------------------------------------------------------------------
CREATE TEMP TABLE snap_ttl AS SELECT * FROM idempotent_record;

SELECT throws_ok($$SELECT * FROM idem_claim('err-ttl', ttl => '0')$$,
    '22023', 'ttl must be a positive interval',
    'idem_claim: ttl ''0'' raises 22023');
SELECT throws_ok($$SELECT * FROM idem_claim('err-ttl', ttl => '-1 second')$$,
    '22023', 'ttl must be a positive interval',
    'idem_claim: ttl ''-1 second'' raises 22023');
-- '1 month -30 days' is equal to '0' as an interval; its calendar length
-- depends on the date (0 days from a day of a 30-day month, 1 day in most
-- 31-day months), and a ttl must be refused or accepted whatever the date.
SELECT throws_ok($$SELECT * FROM idem_claim('err-ttl', ttl => '1 month -30 days')$$,
    '22023', 'ttl must be a positive interval',
    'idem_claim: ttl ''1 month -30 days'' (equal to ''0'' as an interval) raises 22023');
SELECT throws_ok($$SELECT * FROM idem_claim('err-ttl', ttl => '-1 day')$$,
    '22023', 'ttl must be a positive interval',
    'idem_claim: ttl ''-1 day'' raises 22023');
-- the ttl is checked before the key is looked at: an existing record does
-- not make a bad ttl acceptable
SELECT throws_ok($$SELECT * FROM idem_claim('err-held', ttl => '0')$$,
    '22023', 'ttl must be a positive interval',
    'idem_claim: ttl ''0'' raises 22023 for a key that has a record, too');

-- README: a ttl so large that claim time + ttl is out of range is 22008
SELECT throws_ok($$SELECT * FROM idem_claim('err-ttl', ttl => '1000000 years')$$,
    '22008', 'ttl is too long',
    'idem_claim: ttl ''1000000 years'' (past the timestamp range) raises 22008');

SELECT set_eq('TABLE idempotent_record', 'TABLE snap_ttl',
    'the refused ttls changed nothing in idempotent_record');

SELECT is((SELECT outcome FROM idem_claim('err-ttl-ok', ttl => '1 second')), 'claimed',
    'idem_claim: ttl ''1 second'' is accepted');
SELECT lives_ok($$SELECT idem_finish('err-ttl-ok', '{}')$$,
    'setup: err-ttl-ok finished');

-- '1 year -365 days -6 hours' is zero as a fixed duration too (a year is
-- 365.25 days, as extract(epoch FROM ttl) counts it), while its calendar
-- length is not.  (Own key, after the checks above, so that a wrongly
-- accepted claim does not make them fail too.)
SELECT throws_ok($$SELECT * FROM idem_claim('err-ttl-year', ttl => '1 year -365 days -6 hours')$$,
    '22023', 'ttl must be a positive interval',
    'idem_claim: ttl ''1 year -365 days -6 hours'' (zero seconds) raises 22023');

-------------------------------------------------------------------------------
-- IK001: key reused with a different fingerprint
-------------------------------------------------------------------------------
SELECT is((SELECT outcome FROM idem_claim('err-fp', fingerprint => idem_fingerprint('{"sku": 7, "qty": 1}'))),
    'claimed', 'setup: err-fp claimed with the fingerprint of {"sku": 7, "qty": 1}');

-- against an open claim of this transaction
SELECT throws_ok($$SELECT * FROM idem_claim('err-fp', fingerprint => idem_fingerprint('{"sku": 7, "qty": 2}'))$$,
    'IK001', 'idempotency key was already used for a different request',
    'idem_claim: a different fingerprint for an in_progress key raises IK001');

SELECT lives_ok($$SELECT idem_finish('err-fp', '{"order_id": 1001}')$$,
    'setup: err-fp finished');
CREATE TEMP TABLE snap_ik001 AS SELECT * FROM idempotent_record;

-- against a finished record
SELECT throws_ok($$SELECT * FROM idem_claim('err-fp', fingerprint => idem_fingerprint('{"sku": 7, "qty": 2}'))$$,
    'IK001', 'idempotency key was already used for a different request',
    'idem_claim: a different fingerprint for a succeeded key raises IK001');
SELECT throws_ok($$SELECT * FROM idem_claim('err-fp', fingerprint => '\x00'::bytea)$$,
    'IK001', 'idempotency key was already used for a different request',
    'idem_claim: an arbitrary different fingerprint raises IK001');
SELECT throws_ok($$SELECT * FROM idem_claim('err-fp', fingerprint => idem_fingerprint('{"sku": 7, "qty": 2}'), wait => false)$$,
    'IK001', 'idempotency key was already used for a different request',
    'idem_claim: a different fingerprint raises IK001 with wait => false, too');
SELECT throws_ok($$SELECT * FROM idem_claim('err-fp', fingerprint => idem_fingerprint('{"sku": 7, "qty": 2}'), ttl => '1 hour')$$,
    'IK001', 'idempotency key was already used for a different request',
    'idem_claim: a different fingerprint raises IK001 whatever the ttl');

-- against a final failure
SELECT is((SELECT outcome FROM idem_claim('err-fp-failed', fingerprint => idem_fingerprint('{"a": 1}'))),
    'claimed', 'setup: err-fp-failed claimed');
SELECT lives_ok($$SELECT idem_fail('err-fp-failed', '{"error": "declined"}', retryable => false)$$,
    'setup: err-fp-failed failed for good');
DROP TABLE snap_ik001;
CREATE TEMP TABLE snap_ik001 AS SELECT * FROM idempotent_record;
SELECT throws_ok($$SELECT * FROM idem_claim('err-fp-failed', fingerprint => idem_fingerprint('{"a": 2}'))$$,
    'IK001', 'idempotency key was already used for a different request',
    'idem_claim: a different fingerprint for a failed key raises IK001');

SELECT set_eq('TABLE idempotent_record', 'TABLE snap_ik001',
    'the refused IK001 claims changed nothing in idempotent_record (status, result, fingerprint, fence, timestamps)');

-- the fingerprint is compared only within its (scope, key)
SELECT is((SELECT outcome FROM idem_claim('err-fp', scope => 'other', fingerprint => idem_fingerprint('{"sku": 7, "qty": 2}'))),
    'claimed', 'the same key with another fingerprint in another scope is claimed, not IK001');
SELECT lives_ok($$SELECT idem_finish('err-fp', '{}', scope => 'other')$$,
    'setup: err-fp in scope other finished');

-------------------------------------------------------------------------------
-- IK002: finish/fail of a key this transaction does not hold
-------------------------------------------------------------------------------
CREATE TEMP TABLE snap_ik002 AS SELECT * FROM idempotent_record;

SELECT throws_ok($$SELECT idem_finish('err-never', '{}')$$,
    'IK002', 'idempotency key is not claimed by this transaction',
    'idem_finish without a claim raises IK002');
SELECT throws_ok($$SELECT idem_fail('err-never', '{}')$$,
    'IK002', 'idempotency key is not claimed by this transaction',
    'idem_fail (retryable) without a claim raises IK002');
SELECT throws_ok($$SELECT idem_fail('err-never', '{}', retryable => false)$$,
    'IK002', 'idempotency key is not claimed by this transaction',
    'idem_fail (final) without a claim raises IK002');
SELECT is((SELECT count(*) FROM idem_lookup('err-never')), 0::bigint,
    'the refused outcomes did not create a record for err-never');

-- a record this transaction did not claim (as if committed by another one)
INSERT INTO idempotent_record (scope, key, status, result, fence, created_at, updated_at, expires_at)
VALUES ('', 'err-theirs', 'succeeded', '{"order_id": 7}', 1,
        clock_timestamp(), clock_timestamp(), clock_timestamp() + interval '1 day');
CREATE TEMP TABLE snap_theirs AS SELECT * FROM idempotent_record;
SELECT results_eq($$SELECT outcome, result FROM idem_claim('err-theirs')$$,
    $$VALUES ('replay', '{"order_id": 7}'::jsonb)$$,
    'setup: err-theirs, finished elsewhere, is replayed');
SELECT throws_ok($$SELECT idem_finish('err-theirs', '{"order_id": 8}')$$,
    'IK002', 'idempotency key is not claimed by this transaction',
    'idem_finish of a replayed key raises IK002');
SELECT throws_ok($$SELECT idem_fail('err-theirs', '{}', false)$$,
    'IK002', 'idempotency key is not claimed by this transaction',
    'idem_fail of a replayed key raises IK002');
SELECT set_eq('TABLE idempotent_record', 'TABLE snap_theirs',
    'the refused outcomes of a replayed key changed nothing');

-- finish twice, fail after finish
SELECT is((SELECT outcome FROM idem_claim('err-twice')), 'claimed',
    'setup: err-twice claimed');
SELECT lives_ok($$SELECT idem_finish('err-twice', '{"n": 1}')$$,
    'the first idem_finish of err-twice succeeds');
DROP TABLE snap_ik002;
CREATE TEMP TABLE snap_ik002 AS SELECT * FROM idempotent_record;
SELECT throws_ok($$SELECT idem_finish('err-twice', '{"n": 2}')$$,
    'IK002', 'idempotency key already has an outcome',
    'a second idem_finish of the same claim raises IK002');
SELECT throws_ok($$SELECT idem_fail('err-twice', '{"e": 1}', retryable => false)$$,
    'IK002', 'idempotency key already has an outcome',
    'idem_fail (final) after idem_finish raises IK002');
SELECT throws_ok($$SELECT idem_fail('err-twice', '{"e": 1}')$$,
    'IK002', 'idempotency key already has an outcome',
    'idem_fail (retryable) after idem_finish raises IK002');
SELECT results_eq($$SELECT status, result FROM idem_lookup('err-twice')$$,
    $$VALUES ('succeeded'::idem_status, '{"n": 1}'::jsonb)$$,
    'err-twice keeps the first outcome');

-- finish after a final fail, and after a retryable fail (key released)
SELECT is((SELECT outcome FROM idem_claim('err-failed')), 'claimed',
    'setup: err-failed claimed');
SELECT lives_ok($$SELECT idem_fail('err-failed', '{"e": "final"}', retryable => false)$$,
    'setup: err-failed failed for good');
SELECT throws_ok($$SELECT idem_finish('err-failed', '{}')$$,
    'IK002', 'idempotency key already has an outcome',
    'idem_finish after a final idem_fail raises IK002');
SELECT throws_ok($$SELECT idem_fail('err-failed', '{"e": "again"}', retryable => false)$$,
    'IK002', 'idempotency key already has an outcome',
    'a second idem_fail after a final idem_fail raises IK002');
SELECT results_eq($$SELECT status, result FROM idem_lookup('err-failed')$$,
    $$VALUES ('failed'::idem_status, '{"e": "final"}'::jsonb)$$,
    'err-failed keeps the first error');

SELECT is((SELECT outcome FROM idem_claim('err-released')), 'claimed',
    'setup: err-released claimed');
SELECT lives_ok($$SELECT idem_fail('err-released', '{"e": "retry"}')$$,
    'setup: err-released released by a retryable idem_fail');
SELECT throws_ok($$SELECT idem_finish('err-released', '{}')$$,
    'IK002', 'idempotency key already has an outcome',
    'idem_finish after a retryable idem_fail raises IK002');
SELECT throws_ok($$SELECT idem_fail('err-released', '{}')$$,
    'IK002', 'idempotency key already has an outcome',
    'a second retryable idem_fail raises IK002');
SELECT results_eq(
    $$SELECT status, result, fence FROM idem_lookup('err-released')$$,
    $$VALUES ('in_progress'::idem_status, '{"e": "retry"}'::jsonb, 1::bigint)$$,
    'err-released is still the released claim, with its reason, after the refused calls');

-- the scope is part of what is held
SELECT is((SELECT outcome FROM idem_claim('err-scoped', scope => 'a')), 'claimed',
    'setup: err-scoped claimed in scope a');
SELECT throws_ok($$SELECT idem_finish('err-scoped', '{}', scope => 'b')$$,
    'IK002', 'idempotency key is not claimed by this transaction',
    'idem_finish in another scope than the claim raises IK002');
SELECT throws_ok($$SELECT idem_finish('err-scoped', '{}')$$,
    'IK002', 'idempotency key is not claimed by this transaction',
    'idem_finish in the default scope of a key claimed in scope a raises IK002');
SELECT lives_ok($$SELECT idem_finish('err-scoped', '{}', scope => 'a')$$,
    'idem_finish in the claim''s own scope succeeds');

-- a claim made in a subtransaction that rolled back is forgotten
-- (no assertion inside the savepoint: rolling back would undo pgTAP's
-- test counter as well)
SAVEPOINT before_claim;
DO $$
BEGIN
    ASSERT (SELECT outcome FROM idem_claim('err-rolled-back')) = 'claimed';
END
$$;
ROLLBACK TO SAVEPOINT before_claim;
SELECT throws_ok($$SELECT idem_finish('err-rolled-back', '{}')$$,
    'IK002', 'idempotency key is not claimed by this transaction',
    'idem_finish of a claim rolled back to a savepoint raises IK002');
SELECT is((SELECT count(*) FROM idem_lookup('err-rolled-back')), 0::bigint,
    'the claim rolled back to a savepoint left no record');

SELECT * FROM finish();
ROLLBACK;
