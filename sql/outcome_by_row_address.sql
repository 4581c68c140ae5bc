-- The writes after a claim held by this transaction (idem_finish, idem_fail,
-- idem_mark_unknown, idem_checkpoint) fetch the claim's row version by the
-- address where the claim wrote it, without a primary key descent, only
-- while that address provably still holds the claim's row; otherwise they
-- look the key up.  Each scenario runs with idempotency.direct_access on
-- and off and must answer the same; the primary key scans counted in the
-- transaction (pg_stat_get_xact_numscans) show which way the writes went:
-- each claim's read is one scan, each write that looked the key up (and
-- each refusal, which reads the record to say why) one more.
TRUNCATE idempotent_record;
-- a table that once had inheritance children (an earlier test's) keeps
-- relhassubclass, which keeps the direct path off, until ANALYZE
ANALYZE idempotent_record;

CREATE FUNCTION pk_scans() RETURNS bigint
LANGUAGE sql AS $$
    SELECT pg_stat_get_xact_numscans(i.indexrelid)
      FROM pg_index AS i
     WHERE i.indrelid = 'idempotent_record'::regclass AND i.indisprimary
$$;

-- The records of the scenario, as lines (times left out)
CREATE FUNCTION record_lines() RETURNS SETOF text
LANGUAGE sql AS $$
    SELECT format('record %s: %s fence %s result %s recovery point %s lease %s',
                  key, status, fence, result, recovery_point, locked_until IS NOT NULL)
      FROM idempotent_record ORDER BY key
$$;

-- Run statements in a subtransaction that then rolls back
CREATE FUNCTION rolled_back(VARIADIC statements text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        FOR i IN 1 .. array_length(statements, 1) LOOP
            EXECUTE statements[i];
        END LOOP;
        RAISE EXCEPTION 'roll back';
    EXCEPTION WHEN raise_exception THEN
        NULL;
    END;
END;
$$;

-- One scenario, in a subtransaction that is rolled back at the end: its
-- answers (SQLSTATEs of refused calls), the records it leaves, and the
-- primary key scans its writes after the claims made.
CREATE FUNCTION scenario(name text, direct boolean) RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    lines  text[] := '{}';
    r      record;
    scans0 bigint;
BEGIN
    PERFORM set_config('idempotency.direct_access', direct::text, true);
    BEGIN
        PERFORM idem_claim(name || '-warm');    -- the table and plans opened
        PERFORM idem_finish(name || '-warm', '{}');
        scans0 := pk_scans();
        CASE name
        WHEN 'finish' THEN
            PERFORM idem_claim('k');
            PERFORM idem_finish('k', '{"n": 1}');
        WHEN 'fail' THEN
            PERFORM idem_claim('k');
            PERFORM idem_fail('k', '{"e": 1}', retryable => false);
        WHEN 'release' THEN
            PERFORM idem_claim('k');
            PERFORM idem_fail('k', '{"e": 1}', retryable => true);
        WHEN 'unknown' THEN
            PERFORM idem_claim('k');
            PERFORM idem_mark_unknown('k', '{"timeout": true}');
        WHEN 'checkpoints then finish' THEN
            -- each write moves the address to the version it made
            PERFORM idem_claim('k');
            PERFORM idem_checkpoint('k', 'charged');
            PERFORM idem_checkpoint('k', 'shipped');
            PERFORM idem_finish('k', '{"n": 1}');
        WHEN 'row updated by the caller' THEN
            -- the address holds an older version: the key lookup finds the new one
            PERFORM idem_claim('k');
            UPDATE idempotent_record SET updated_at = updated_at WHERE key = 'k';
            PERFORM idem_finish('k', '{"n": 1}');
        WHEN 'row rekeyed by the caller' THEN
            PERFORM idem_claim('k');
            UPDATE idempotent_record SET key = 'k2' WHERE key = 'k';
            BEGIN
                PERFORM idem_finish('k', '{"n": 1}');
            EXCEPTION WHEN OTHERS THEN
                lines := lines || format('finish k: %s', SQLSTATE);
            END;
            UPDATE idempotent_record SET key = 'k' WHERE key = 'k2';
            PERFORM idem_finish('k', '{"n": 2}');
        WHEN 'row updated in the finishing statement' THEN
            PERFORM idem_claim('k');
            BEGIN
                UPDATE idempotent_record SET recovery_point = 'mine' WHERE key = 'k'
                RETURNING idem_finish('k', '{"n": 1}') INTO r;
            EXCEPTION WHEN OTHERS THEN
                lines := lines || format('finish k in the UPDATE: %s', SQLSTATE);
            END;
            BEGIN
                PERFORM idem_finish('k', '{"n": 2}');
            EXCEPTION WHEN OTHERS THEN
                lines := lines || format('finish k after the UPDATE: %s', SQLSTATE);
            END;
        WHEN 'checkpoint rolled back' THEN
            -- the address moved in a subtransaction that rolled back is forgotten
            PERFORM idem_claim('k');
            PERFORM rolled_back($q$SELECT idem_checkpoint('k', 'charged')$q$);
            PERFORM idem_finish('k', '{"n": 1}');
        WHEN 'checkpoint in a subtransaction kept' THEN
            PERFORM idem_claim('k');
            BEGIN    -- a subtransaction (the EXCEPTION clause), released
                PERFORM idem_checkpoint('k', 'charged');
            EXCEPTION WHEN raise_exception THEN
                NULL;
            END;
            PERFORM idem_finish('k', '{"n": 1}');
        WHEN 'outcome rolled back' THEN
            PERFORM idem_claim('k');
            PERFORM rolled_back($q$SELECT idem_finish('k', '{"n": 1}')$q$);
            PERFORM idem_finish('k', '{"n": 2}');
        WHEN 'deleted and claimed again' THEN
            -- the newest claim's address is the new row's
            PERFORM idem_claim('k');
            DELETE FROM idempotent_record WHERE key = 'k';
            SELECT * INTO r FROM idem_claim('k');
            lines := lines || format('claim k again: %s fence %s', r.outcome, r.fence);
            PERFORM idem_finish('k', '{"n": 1}');
        WHEN 'claimed again in a subtransaction rolled back' THEN
            -- the first claim is the newest again, its row alive again
            PERFORM idem_claim('k');
            PERFORM rolled_back($q$DELETE FROM idempotent_record WHERE key = 'k'$q$,
                                $q$SELECT idem_claim('k')$q$,
                                $q$SELECT idem_checkpoint('k', 'second')$q$);
            PERFORM idem_finish('k', '{"n": 1}');
        WHEN 'claim rolled back, claimed again' THEN
            PERFORM rolled_back($q$SELECT idem_claim('k')$q$);
            PERFORM idem_claim('k');
            PERFORM idem_finish('k', '{"n": 1}');
        WHEN 'truncated' THEN
            -- the address is in storage TRUNCATE replaced; another claim
            -- may have written a row at the same TID of the new storage
            PERFORM idem_claim('k');
            TRUNCATE idempotent_record;
            PERFORM idem_claim('other');
            BEGIN
                PERFORM idem_finish('k', '{"n": 1}');
            EXCEPTION WHEN OTHERS THEN
                lines := lines || format('finish k: %s', SQLSTATE);
            END;
            PERFORM idem_finish('other', '{"n": 2}');
        WHEN 'reclaimed expired' THEN
            INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
            VALUES ('k', 'succeeded', 3, now() - interval '2 days', now() - interval '2 days',
                    now() - interval '1 day');
            SELECT * INTO r FROM idem_claim('k');
            lines := lines || format('claim k: %s fence %s', r.outcome, r.fence);
            PERFORM idem_checkpoint('k', 'charged');
            PERFORM idem_finish('k', '{"n": 1}');
        WHEN 'wrong fence' THEN
            PERFORM idem_claim('k');
            BEGIN
                PERFORM idem_finish('k', '{"n": 1}', fence => 2);
            EXCEPTION WHEN OTHERS THEN
                lines := lines || format('finish k with fence 2: %s', SQLSTATE);
            END;
            PERFORM idem_finish('k', '{"n": 1}', fence => 1);
        END CASE;
        lines := lines || ARRAY(SELECT record_lines());
        -- last: the scans, which differ between the paths
        lines := lines || format('primary key scans: %s', pk_scans() - scans0);
        RAISE EXCEPTION 'roll back the scenario';
    EXCEPTION WHEN raise_exception THEN
        NULL;
    END;
    RETURN lines;
END;
$$;

-- Each scenario both ways: the same answers and records, and the primary
-- key scans with the direct path on (not shown where planned SQL wrote:
-- how its plan reads the table is the planner's choice)
CREATE FUNCTION both_ways(name text, show_scans boolean DEFAULT true) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    direct text[] := scenario(name, true);
    sql    text[] := scenario(name, false);
    n      int := array_length(direct, 1);
BEGIN
    RETURN NEXT format('%s: same answers and records with direct_access off: %s',
                       name, direct[1:n - 1] = sql[1:n - 1]);
    RETURN QUERY SELECT '    ' || l FROM unnest(direct[1:n - 1]) AS l;
    IF show_scans THEN
        RETURN NEXT '    ' || direct[n];
    END IF;
END;
$$;

-- one scan per claim (its read) when every write after it took the address
SELECT both_ways('finish');
SELECT both_ways('fail');
SELECT both_ways('release');
SELECT both_ways('unknown');
SELECT both_ways('checkpoints then finish');
SELECT both_ways('checkpoint in a subtransaction kept');
SELECT both_ways('claim rolled back, claimed again');
SELECT both_ways('deleted and claimed again');
-- the address no longer holds the claim's row, or an outcome rolled back
-- made it forget it: the key lookup
SELECT both_ways('row updated by the caller');
SELECT both_ways('row rekeyed by the caller');
SELECT both_ways('row updated in the finishing statement');
SELECT both_ways('checkpoint rolled back');
SELECT both_ways('outcome rolled back');
SELECT both_ways('claimed again in a subtransaction rolled back');
SELECT both_ways('truncated');
-- no address: a reclaim (planned SQL); a refused write
SELECT both_ways('reclaimed expired', show_scans => false);
SELECT both_ways('wrong fence');

-- SERIALIZABLE: the primary key scan's predicate locks are needed
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT outcome FROM idem_claim('warm');
SELECT idem_finish('warm', '{}');
SELECT pk_scans() AS scans_before \gset
SELECT outcome FROM idem_claim('k');
SELECT idem_finish('k', '{"n": 1}');
SELECT pk_scans() - :scans_before AS primary_key_scans;
SELECT * FROM record_lines();
ROLLBACK;

-- the outcome through the address commits like any other
BEGIN;
SELECT outcome FROM idem_claim('committed');
SELECT idem_checkpoint('committed', 'charged');
SELECT idem_finish('committed', '{"n": 1}');
COMMIT;
SELECT outcome, status, result, fence, recovery_point FROM idem_claim('committed');

DROP FUNCTION both_ways(text, boolean);
DROP FUNCTION scenario(text, boolean);
DROP FUNCTION rolled_back(text[]);
DROP FUNCTION record_lines();
DROP FUNCTION pk_scans();
TRUNCATE idempotent_record;
