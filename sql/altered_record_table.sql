-- A record table whose layout changed after CREATE EXTENSION (a column
-- dropped and added again, a column's type changed, a column added) gives
-- the same answers through every function, with the direct path on or off,
-- or a clear error that names the table; never a crash or an internal
-- error.  (idem_lookup returned the row with its values shifted past the
-- dropped column, or crashed the server.)
TRUNCATE idempotent_record;

CREATE FUNCTION altered_scenario() RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    PERFORM idem_claim('a1', fingerprint => '\x01');
    PERFORM idem_finish('a1', '{"n": 1}');
    SELECT * INTO r FROM idem_claim('a1', fingerprint => '\x01');
    RETURN NEXT format('replay: %s %s %s', r.outcome, r.status, r.result);
    BEGIN
        PERFORM idem_claim('a1', fingerprint => '\x02');
    EXCEPTION WHEN OTHERS THEN
        RETURN NEXT format('other request: %s', SQLSTATE);
    END;
    SELECT * INTO r FROM idem_lookup('a1');
    RETURN NEXT format('lookup: %s %s %s %s %s', r.key, r.status, r.fingerprint, r.result, r.fence);
    PERFORM idem_claim('a2', lease => '1 hour', fingerprint => '\x03');
    PERFORM idem_checkpoint('a2', 'step 1', fence => 1);
    PERFORM idem_mark_unknown('a2', '{"timeout": true}', fence => 1);
    RETURN QUERY SELECT format('pending: %s %s %s %s', key, status, recovery_point, detail)
                   FROM idem_pending;
    PERFORM idem_finish('a2', '{"n": 2}', fence => 1);
    UPDATE idempotent_record SET expires_at = now() - interval '1 hour', created_at = now() - interval '2 hours',
                                 updated_at = now() - interval '2 hours';
    RETURN NEXT format('purged: %s', idem_purge(100));
    SELECT * INTO r FROM idem_claim('a1', fingerprint => '\x02');
    RETURN NEXT format('after purge: %s %s fence %s', r.outcome, r.status, r.fence);
    PERFORM idem_fail('a1', '{"e": 1}', retryable => false);
    RETURN NEXT format('once: %s %s', idem_once('m'), idem_once('m'));
    RETURN QUERY SELECT format('row: %s %s %s %s', key, status, fingerprint, result)
                   FROM idempotent_record ORDER BY key;
END $$;

CREATE FUNCTION altered_both_paths() RETURNS SETOF text
LANGUAGE plpgsql AS $$
BEGIN
    SET LOCAL idempotency.direct_access = on;
    RETURN QUERY SELECT 'direct | ' || line FROM altered_scenario() AS line;
    TRUNCATE idempotent_record;
    SET LOCAL idempotency.direct_access = off;
    RETURN QUERY SELECT 'sql    | ' || line FROM altered_scenario() AS line;
    TRUNCATE idempotent_record;
END $$;

-- a column dropped and added again: the same columns, in another order
ALTER TABLE idempotent_record DROP COLUMN fingerprint;
ALTER TABLE idempotent_record ADD COLUMN fingerprint bytea;
SELECT * FROM altered_both_paths();

-- a column with another type that the values still convert to (the
-- columns idem_pending shows cannot change type while the view exists)
ALTER TABLE idempotent_record ALTER COLUMN fingerprint TYPE text;
-- (a new session: this one's cached plans know the table's old row type)
\c -
SELECT * FROM altered_both_paths();

-- a column added
ALTER TABLE idempotent_record ADD COLUMN note text DEFAULT 'n';
\c -
SELECT * FROM altered_both_paths();
ALTER TABLE idempotent_record DROP COLUMN note;

-- a column whose type the extension cannot read or write any more: an
-- error whose statement names the table, the same on both paths
ALTER TABLE idempotent_record ALTER COLUMN fingerprint TYPE boolean USING NULL;
SET idempotency.direct_access = on;
SELECT outcome FROM idem_claim('b1', fingerprint => '\x01');
SET idempotency.direct_access = off;
SELECT outcome FROM idem_claim('b1', fingerprint => '\x01');
RESET idempotency.direct_access;
ALTER TABLE idempotent_record ALTER COLUMN fingerprint TYPE bytea USING NULL;
\c -
SELECT * FROM altered_both_paths();

DROP FUNCTION altered_both_paths();
DROP FUNCTION altered_scenario();

-- a status the extension does not know (a value added to idem_status):
-- the same 22000 on both paths, never an internal error
ALTER TYPE idem_status ADD VALUE 'weird';
INSERT INTO idempotent_record (scope, key, status, fence, created_at, updated_at, expires_at)
VALUES ('', 'w', 'weird', 1, now(), now(), now() + interval '1 day');
SET idempotency.direct_access = on;
SELECT outcome FROM idem_claim('w');
SELECT idem_finish('w', '{}', fence => 1);
SET idempotency.direct_access = off;
SELECT outcome FROM idem_claim('w');
SELECT idem_finish('w', '{}', fence => 1);
RESET idempotency.direct_access;

-- a trigger that cancels updates of the record: an outcome that changes
-- no row is refused (IK002) with what may have refused it, on both paths
-- (a trigger on the table sends the direct path to SQL)
DELETE FROM idempotent_record WHERE key = 'w';
CREATE FUNCTION cancel_update() RETURNS trigger LANGUAGE plpgsql
  AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER cancel_update BEFORE UPDATE ON idempotent_record
  FOR EACH ROW EXECUTE FUNCTION cancel_update();
BEGIN;
SELECT outcome FROM idem_claim('cancelled');
SELECT idem_finish('cancelled', '{}');
ROLLBACK;
DROP TRIGGER cancel_update ON idempotent_record;
DROP FUNCTION cancel_update();

-- the next tests get the table as installed
DROP EXTENSION idempotency;
CREATE EXTENSION idempotency;
