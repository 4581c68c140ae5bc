-- A fence the record never issued (README "Writes after a claim"): zero, a
-- negative one, or one larger than the record's current fence.  Every
-- fenced write refuses it with IK003 (counted as a stale fence: see
-- stats.sql), without saying that the claim was taken over; only an older,
-- real fence is called stale.  Nothing changes.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;
SELECT outcome, fence FROM idem_claim('nf', lease => '1 hour');

-- the whole message for each kind of fence
SELECT idem_finish('nf', '{"by": "nobody"}', fence => 0);
:sqlstate
SELECT idem_finish('nf', '{"by": "nobody"}', fence => -1);
:sqlstate
SELECT idem_finish('nf', '{"by": "nobody"}', fence => 2);
:sqlstate

-- every fenced write, every kind of fence: the errmsg
CREATE FUNCTION pg_temp.refusal(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || SQLERRM;
END $$;
SELECT f AS fence, fn, pg_temp.refusal(format(sql, f)) AS answer
  FROM (VALUES ('0'), ('-1'), ('-9223372036854775808'), ('2'), ('9223372036854775807')) AS v(f),
       (VALUES (1, 'idem_finish', $$SELECT idem_finish('nf', '{}', fence => %s)$$),
               (2, 'idem_fail', $$SELECT idem_fail('nf', '{}', retryable => false, fence => %s)$$),
               (3, 'idem_fail retryable', $$SELECT idem_fail('nf', '{}', retryable => true, fence => %s)$$),
               (4, 'idem_mark_unknown', $$SELECT idem_mark_unknown('nf', '{}', fence => %s)$$),
               (5, 'idem_checkpoint', $$SELECT idem_checkpoint('nf', 'p', fence => %s)$$),
               (6, 'idem_extend_lease', $$SELECT idem_extend_lease('nf', '1 day', fence => %s)$$)) AS w(ord, fn, sql)
 ORDER BY f::bigint, ord;
SELECT status, result, recovery_point, fence FROM idempotent_record WHERE key = 'nf';

-- after a takeover (fence 2) the older fence 1 was real: "taken over";
-- 0 and 3 were never issued
UPDATE idempotent_record SET locked_until = now() - interval '1 second' WHERE key = 'nf';
SELECT outcome, fence FROM idem_claim('nf', lease => '1 hour');
SELECT f AS fence, pg_temp.refusal(format($$SELECT idem_finish('nf', '{}', fence => %s)$$, f)) AS answer
  FROM (VALUES (1), (0), (3)) AS v(f);
-- the holder of fence 2 finishes
SELECT idem_finish('nf', '{"by": "fence 2"}', fence => 2);
SELECT status, result, fence FROM idempotent_record WHERE key = 'nf';

-- an in-transaction claim: a fence given must be the claim's
BEGIN;
SELECT outcome, fence FROM idem_claim('nf-tx');
SELECT idem_finish('nf-tx', '{}', fence => 0);
:sqlstate
ROLLBACK;

TRUNCATE idempotent_record;
