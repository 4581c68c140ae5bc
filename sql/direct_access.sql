-- The direct heap/index path (record_direct.c) against the planned SQL it
-- stands in for: the same scenario run with idempotency.direct_access on
-- and off must give the same answers, SERIALIZABLE reads must take the same
-- kind of predicate locks, and whatever the SQL would do beyond the row
-- change (triggers, a constraint or default added to the table, a missing
-- privilege) must leave the work to the SQL.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;

-- Every claim answer, replay and purge count of one scenario, as lines.
-- Each run starts from an empty table.  (Its leased claims commit on their
-- own, so it cannot run in a block that an error rolls back.)
CREATE FUNCTION direct_scenario() RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    lines text[] := '{}';
    big   jsonb := jsonb_build_object('blob', repeat('x', 100000));
    r     record;
BEGIN
    BEGIN
        -- new key, finish, replay, another request with the same key
        SELECT * INTO r FROM idem_claim('k1', scope => 's', fingerprint => '\x01');
        lines := lines || format('claim k1: %s %s fence %s', r.outcome, r.status, r.fence);
        PERFORM idem_finish('k1', '{"n": 1}', scope => 's');
        SELECT * INTO r FROM idem_claim('k1', scope => 's', fingerprint => '\x01');
        lines := lines || format('again k1: %s %s %s', r.outcome, r.status, r.result);
        BEGIN
            PERFORM idem_claim('k1', scope => 's', fingerprint => '\x02');
        EXCEPTION WHEN OTHERS THEN
            lines := lines || format('other request k1: %s', SQLSTATE);
        END;
        -- a second claim of our own open claim, in the same statement (the
        -- key depends on v.i so that idem_claim runs once per row)
        SELECT string_agg(c.outcome, ',' ORDER BY v.i) AS outcomes INTO r
          FROM (VALUES (1), (2)) AS v(i),
               LATERAL idem_claim(left('twice' || v.i, 5)) AS c;
        lines := lines || format('twice in one statement: %s', r.outcomes);
        PERFORM idem_fail('twice', '{"e": 1}', retryable => false);
        SELECT * INTO r FROM idem_claim('twice');
        lines := lines || format('twice failed: %s %s %s', r.outcome, r.status, r.result);
        -- an outcome left unknown, then reconciled with the fence
        PERFORM idem_claim('u', lease => '1 hour');
        PERFORM idem_mark_unknown('u', '{"timeout": true}', fence => 1);
        SELECT * INTO r FROM idem_claim('u');
        lines := lines || format('unknown u: %s %s', r.outcome, r.status);
        PERFORM idem_finish('u', '{"reconciled": true}', fence => 1);
        SELECT * INTO r FROM idem_claim('u');
        lines := lines || format('reconciled u: %s %s %s', r.outcome, r.status, r.result);
        BEGIN
            PERFORM idem_finish('u', '{"again": true}', fence => 1);
        EXCEPTION WHEN OTHERS THEN
            lines := lines || format('finish u again: %s', SQLSTATE);
        END;
        lines := lines || format('once m: %s then %s', idem_once('m'), idem_once('m'));
        -- a live lease, an expired record, an abandoned claim
        SELECT * INTO r FROM idem_claim('L', lease => '1 hour');
        SELECT * INTO r FROM idem_claim('L');
        lines := lines || format('leased L: %s %s retry_after %s', r.outcome, r.status,
                                 r.retry_after = interval '1 second');
        INSERT INTO idempotent_record (key, status, result, fence, created_at, updated_at, expires_at)
        VALUES ('old', 'succeeded', '{"old": true}', 4, now() - interval '2 days', now() - interval '2 days', now() - interval '1 day');
        SELECT * INTO r FROM idem_claim('old');
        lines := lines || format('expired old: %s %s fence %s result %s', r.outcome, r.status, r.fence, r.result);
        PERFORM idem_finish('old', '{"new": true}');
        INSERT INTO idempotent_record (key, status, recovery_point, fence, locked_until, created_at, updated_at, expires_at)
        VALUES ('gone', 'in_progress', 'charged', 2, now() - interval '1 minute', now(), now(), now() + interval '1 day');
        SELECT * INTO r FROM idem_claim('gone', lease => '1 minute');
        lines := lines || format('abandoned gone: %s fence %s recovery point %s', r.outcome, r.fence, r.recovery_point);
        -- a TOASTed result replays whole
        PERFORM idem_claim('big');
        PERFORM idem_finish('big', big);
        SELECT * INTO r FROM idem_claim('big');
        lines := lines || format('big: %s, same result %s', r.outcome, r.result = big);
        SELECT * INTO r FROM idem_lookup('big');
        lines := lines || format('lookup big: %s fence %s', r.status, r.fence);
        -- purge: expired records go; unknown and live leases stay
        INSERT INTO idempotent_record (key, status, fence, locked_until, created_at, updated_at, expires_at)
        SELECT 'p' || i, CASE i WHEN 4 THEN 'unknown' ELSE 'succeeded' END::idem_status, 1,
               CASE i WHEN 5 THEN now() + interval '1 hour' END,
               now() - interval '2 days', now() - interval '2 days', now() - interval '1 day' * i
          FROM generate_series(1, 5) AS i;
        lines := lines || format('purge 2: %s', idem_purge(2));
        lines := lines || format('purge 10: %s', idem_purge(10));
        SELECT string_agg(key, ',' ORDER BY key) AS keys INTO r
          FROM idempotent_record WHERE key LIKE 'p_';
        lines := lines || format('left after purge: %s', r.keys);
    END;
    RETURN QUERY SELECT unnest(lines);
END
$$;

SET idempotency.direct_access = on;
CREATE TEMP TABLE seen_direct AS SELECT row_number() OVER () AS n, l FROM direct_scenario() AS l;
TRUNCATE idempotent_record;
SET idempotency.direct_access = off;
CREATE TEMP TABLE seen_sql AS SELECT row_number() OVER () AS n, l FROM direct_scenario() AS l;
TRUNCATE idempotent_record;
RESET idempotency.direct_access;
SELECT l FROM seen_direct ORDER BY n;
-- the same lines, line for line
SELECT count(*) AS lines, count(*) FILTER (WHERE d.l IS DISTINCT FROM s.l) AS differing
  FROM seen_direct d FULL JOIN seen_sql s USING (n);

-- SERIALIZABLE: the read of a claim takes predicate locks (from the index
-- and table access methods) as the SQL's index scan does
INSERT INTO idempotent_record (key, status, result, fence, created_at, updated_at, expires_at)
VALUES ('ser', 'succeeded', '{}', 1, now(), now(), now() + interval '1 day');
-- pg_temp.claim_locks(direct_access): claims 'ser' with the direct path on
-- or off, and answers its outcome and the SIRead locks the transaction holds
CREATE FUNCTION pg_temp.claim_locks(direct text)
RETURNS TABLE (outcome text, locktype text, relation regclass) LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('idempotency.direct_access', direct, true);
    outcome := (SELECT c.outcome FROM idem_claim('ser') c);
    RETURN QUERY SELECT outcome, l.locktype, l.relation::regclass FROM pg_locks l
     WHERE l.mode = 'SIReadLock' AND l.pid = pg_backend_pid() ORDER BY 2, 3;
END $$;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT * FROM pg_temp.claim_locks('on');
COMMIT;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT * FROM pg_temp.claim_locks('off');
COMMIT;

-- purge of a table with a DELETE trigger: the SQL runs and fires it
TRUNCATE idempotent_record;
CREATE TABLE purged_log (key text);
CREATE FUNCTION log_purged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO purged_log VALUES (OLD.key);
    RETURN OLD;
END $$;
CREATE TRIGGER log_purged AFTER DELETE ON idempotent_record
    FOR EACH ROW EXECUTE FUNCTION log_purged();
INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
SELECT 't' || i, 'succeeded', 1, now() - interval '2 days', now() - interval '2 days', now() - interval '1 day'
  FROM generate_series(1, 3) AS i;
SELECT idem_purge(10);
SELECT key FROM purged_log ORDER BY key;
DROP TRIGGER log_purged ON idempotent_record;
DROP FUNCTION log_purged();
DROP TABLE purged_log;

-- without the expires_at index purge also falls back to the SQL
INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
VALUES ('noindex', 'succeeded', 1, now() - interval '2 days', now() - interval '2 days', now() - interval '1 day');
BEGIN;
DROP INDEX idempotent_record_expires_at_idx;
SELECT idem_purge(10);
ROLLBACK;

-- writes with more to do than the row change run as SQL: a trigger fires
CREATE TABLE written_log (op text, key text, status idem_status);
CREATE FUNCTION log_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO written_log VALUES (TG_OP, NEW.key, NEW.status);
    RETURN NEW;
END $$;
CREATE TRIGGER log_written AFTER INSERT OR UPDATE ON idempotent_record
    FOR EACH ROW EXECUTE FUNCTION log_written();
BEGIN;
SELECT outcome FROM idem_claim('trig');
SELECT idem_finish('trig', '{}');
COMMIT;
SELECT op, key, status FROM written_log ORDER BY op;
DROP TRIGGER log_written ON idempotent_record;
DROP FUNCTION log_written();
DROP TABLE written_log;

-- ... a CHECK constraint added to the table is enforced
\set VERBOSITY terse
BEGIN;
ALTER TABLE idempotent_record ADD CONSTRAINT no_test_keys CHECK (key NOT LIKE 'test-%');
SELECT outcome FROM idem_claim('test-1');
:sqlstate
ROLLBACK;
\set VERBOSITY default

-- ... a column added with a default gets it
BEGIN;
ALTER TABLE idempotent_record ADD COLUMN origin text DEFAULT 'api';
SELECT outcome FROM idem_claim('with-default');
SELECT key, origin FROM idempotent_record WHERE key = 'with-default';
ROLLBACK;

-- ... a NOT NULL constraint added to a column is enforced
\set VERBOSITY terse
BEGIN;
DELETE FROM idempotent_record WHERE fingerprint IS NULL;
ALTER TABLE idempotent_record ALTER COLUMN fingerprint SET NOT NULL;
SELECT outcome FROM idem_claim('no-fingerprint');
:sqlstate
ROLLBACK;

-- ... a unique index added on the same columns is an arbiter of the
-- claim's INSERT ... ON CONFLICT too: with a case-insensitive one, 'abc'
-- conflicts with 'ABC' and the claim can see no record to answer with.
-- It needs an ICU collation: a server built without ICU skips it, and
-- answers expected/direct_access_1.out
SELECT count(*) > 0 AS have_icu FROM pg_collation WHERE collprovider = 'i' \gset
\if :have_icu
BEGIN;
CREATE COLLATION direct_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE UNIQUE INDEX direct_ci_key ON idempotent_record (scope, key COLLATE direct_ci);
SELECT outcome FROM idem_claim('ABC');
SELECT idem_finish('ABC', '{}');
SELECT outcome FROM idem_claim('abc');
:sqlstate
ROLLBACK;
\else
\echo 'skipped: this server was built without ICU (a case-insensitive unique index needs an ICU collation)'
\endif

-- ... a CHECK constraint replaced under the install script's name is
-- enforced, and so is an identity column
BEGIN;
ALTER TABLE idempotent_record DROP CONSTRAINT idempotent_record_key_check,
    ADD CONSTRAINT idempotent_record_key_check CHECK (length(key) < 5) NOT VALID;
SELECT outcome FROM idem_claim('too-long');
:sqlstate
ROLLBACK;
BEGIN;
ALTER TABLE idempotent_record ALTER COLUMN fence DROP DEFAULT,
    ALTER COLUMN fence ADD GENERATED ALWAYS AS IDENTITY;
SELECT outcome FROM idem_claim('identity');
:sqlstate
ROLLBACK;
\set VERBOSITY default

-- ... a row of an inheritance child is no record: the SQL reads the
-- table alone (ONLY), so a claim does not find it and purge leaves it
BEGIN;
CREATE TABLE direct_archive () INHERITS (idempotent_record);
INSERT INTO direct_archive (key, status, result, fence, created_at, updated_at, expires_at)
VALUES ('archived', 'succeeded', '{"archived": true}', 1, now(), now(), now() + interval '1 day'),
       ('archived-old', 'succeeded', '{}', 1, now(), now(), now() - interval '1 day');
SELECT outcome, result FROM idem_claim('archived');
SELECT idem_purge(10) >= 1 AS purged;
SELECT key FROM direct_archive;
ROLLBACK;

-- ... purge walks an ascending B-tree on expires_at (one its owner made
-- instead of the BRIN index) directly, oldest first; a descending one it
-- leaves to the SQL, which promises no order (two of the five go)
INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
SELECT 'e' || i, 'succeeded', 1, now() - interval '2 days', now() - interval '2 days', now() - interval '1 hour' * (10 - i)
  FROM generate_series(1, 5) AS i;
BEGIN;
DELETE FROM idempotent_record WHERE key NOT LIKE 'e_';
DROP INDEX idempotent_record_expires_at_idx;
CREATE INDEX direct_expires_asc ON idempotent_record (expires_at);
SELECT idem_purge(2);
SELECT string_agg(key, ',' ORDER BY key) AS left_after_two FROM idempotent_record WHERE key LIKE 'e_';
ROLLBACK;
BEGIN;
DELETE FROM idempotent_record WHERE key NOT LIKE 'e_';
DROP INDEX idempotent_record_expires_at_idx;
CREATE INDEX direct_expires_desc ON idempotent_record (expires_at DESC);
SELECT idem_purge(2);
SELECT count(*) AS left_after_two FROM idempotent_record WHERE key LIKE 'e_';
ROLLBACK;
DELETE FROM idempotent_record WHERE key LIKE 'e_';

-- ... a constraint that calls the extension while a write runs (nested
-- calls keep the state of the enclosing one), with either path; each
-- commits, where a lost SPI connection would warn
CREATE FUNCTION direct_nested_lookup(k text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM * FROM idem_lookup('nested-' || k);
    -- a nested call that fails inside its bracket, the error caught here
    BEGIN
        PERFORM idem_finish('nested-never-claimed', '{}');
    EXCEPTION WHEN SQLSTATE 'IK002' THEN
        NULL;
    END;
    RETURN true;
END $$;
ALTER TABLE idempotent_record ADD CONSTRAINT direct_nested CHECK (direct_nested_lookup(key)),
    ADD CONSTRAINT direct_literal CHECK (key NOT IN ('a-literal-long-enough-to-be-by-reference'));
BEGIN;
SELECT outcome FROM idem_claim('nested-1');
SELECT idem_finish('nested-1', '{}');
COMMIT;
SET idempotency.direct_access = off;
BEGIN;
SELECT outcome FROM idem_claim('nested-2');
SELECT idem_finish('nested-2', '{}');
COMMIT;
RESET idempotency.direct_access;
SELECT key, status FROM idempotent_record WHERE key LIKE 'nested-%' ORDER BY key;
ALTER TABLE idempotent_record DROP CONSTRAINT direct_nested, DROP CONSTRAINT direct_literal;
DROP FUNCTION direct_nested_lookup(text);
DELETE FROM idempotent_record WHERE key LIKE 'nested-%';

-- ... a primary key on other columns, or none, leaves everything to the SQL
INSERT INTO idempotent_record (key, status, result, fence, created_at, updated_at, expires_at)
VALUES ('pk', 'succeeded', '{"pk": true}', 1, now(), now(), now() + interval '1 day');
BEGIN;
ALTER TABLE idempotent_record DROP CONSTRAINT idempotent_record_pkey,
    ADD PRIMARY KEY (key, scope);
SELECT outcome, result FROM idem_claim('pk');
ROLLBACK;
BEGIN;
ALTER TABLE idempotent_record DROP CONSTRAINT idempotent_record_pkey;
CREATE UNIQUE INDEX direct_no_pk ON idempotent_record (scope, key);
SELECT outcome, result FROM idem_claim('pk');
ROLLBACK;

-- ... a row this transaction has locked is purged, as FOR UPDATE SKIP
-- LOCKED takes over a lock of its own transaction
INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
VALUES ('mine-locked', 'succeeded', 1, now() - interval '2 days', now() - interval '2 days', now() - interval '1 day');
BEGIN;
SELECT key FROM idempotent_record WHERE key = 'mine-locked' FOR SHARE;
SELECT idem_purge(10) > 0 AS purged;
SELECT count(*) AS mine_locked_left FROM idempotent_record WHERE key = 'mine-locked';
ROLLBACK;
DELETE FROM idempotent_record WHERE key IN ('pk', 'mine-locked');

-- ... a caller without USAGE on the extension's schema is refused (42501),
-- also through a function whose body was parsed by its owner
CREATE SCHEMA direct_app;
CREATE FUNCTION direct_app.claim(k text) RETURNS text LANGUAGE sql
BEGIN ATOMIC
    SELECT (idem_claim(k)).outcome;
END;
CREATE ROLE regress_direct_nousage;
GRANT USAGE ON SCHEMA direct_app TO regress_direct_nousage;
GRANT SELECT, INSERT, UPDATE ON idempotent_record TO regress_direct_nousage;
REVOKE USAGE ON SCHEMA public FROM PUBLIC;
SET ROLE regress_direct_nousage;
\set VERBOSITY terse
BEGIN;
SELECT direct_app.claim('no-usage');
:sqlstate
ROLLBACK;
\set VERBOSITY default
RESET ROLE;
GRANT USAGE ON SCHEMA public TO PUBLIC;
REVOKE ALL ON idempotent_record FROM regress_direct_nousage;
DROP FUNCTION direct_app.claim(text);
DROP SCHEMA direct_app;
DROP ROLE regress_direct_nousage;

-- ... and a role lacking one of the privileges a write needs is refused
-- (42501): here purge without UPDATE (its FOR UPDATE needs it), finish
-- without UPDATE
CREATE ROLE regress_direct_partial;
GRANT SELECT, INSERT, DELETE ON idempotent_record TO regress_direct_partial;
GRANT EXECUTE ON FUNCTION idem_purge(integer) TO regress_direct_partial;
INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
VALUES ('expired', 'succeeded', 1, now() - interval '2 days', now() - interval '2 days', now() - interval '1 day');
\i sql/include/try.sql
SET ROLE regress_direct_partial;
-- (pg_temp.try, in one transaction: the claim is kept for the finish)
BEGIN;
SELECT c AS call, pg_temp.try(c, keep => true) AS partial FROM (VALUES ('SELECT idem_purge(10)'),
    ($$SELECT outcome FROM idem_claim('partial')$$), ($$SELECT idem_finish('partial', '{}')$$)) AS v(c);
ROLLBACK;
RESET ROLE;
SELECT key FROM idempotent_record ORDER BY key;
REVOKE ALL ON idempotent_record FROM regress_direct_partial;
REVOKE ALL ON FUNCTION idem_purge(integer) FROM regress_direct_partial;
DROP ROLE regress_direct_partial;

-- the table found once per schema is looked up again when it is replaced
BEGIN;
SELECT outcome FROM idem_claim('before-recreate');
SELECT idem_finish('before-recreate', '{}');
DROP EXTENSION idempotency;
CREATE EXTENSION idempotency;
SELECT outcome FROM idem_claim('before-recreate');
SELECT idem_finish('before-recreate', '{"recreated": true}');
SELECT key, result FROM idempotent_record;
ROLLBACK;

-- the setting is a boolean
SET idempotency.direct_access = 'sometimes';
:sqlstate

DROP FUNCTION direct_scenario();
TRUNCATE idempotent_record;
