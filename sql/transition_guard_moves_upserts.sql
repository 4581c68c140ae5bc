-- idem_transition_guard and the writes that are not a plain UPDATE or
-- INSERT (README "idem_transition_guard"), under every declaration the
-- README allows: a row that an UPDATE moves to another partition is a
-- transition like any other (a BEFORE UPDATE trigger sees the move as an
-- update on the old partition; an AFTER trigger sees its DELETE and
-- INSERT and tells them from a row deleted and a row inserted); an upsert
-- that updates an existing row is a transition from that row's state, one
-- that inserts is a new row, one that does nothing is nothing; MERGE
-- likewise.  Every step runs in a subtransaction that is rolled back, so
-- each starts from the same rows.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'

-- 'ok' or the SQLSTATE of sql, which changes nothing
CREATE FUNCTION pg_temp.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RAISE EXCEPTION USING ERRCODE = 'ZZ999';
EXCEPTION
    WHEN SQLSTATE 'ZZ999' THEN RETURN 'ok';
    WHEN OTHERS THEN RETURN SQLSTATE;
END $$;

-- a plain table
CREATE TABLE tgm_orders (id int PRIMARY KEY, status text, note text);
INSERT INTO tgm_orders VALUES (1, 'pending'), (2, 'paid');
-- partitioned by status: pending and paid in one partition, shipped and
-- cancelled in the other
CREATE TABLE tgm_split (id int, status text, note text) PARTITION BY LIST (status);
CREATE TABLE tgm_split_open PARTITION OF tgm_split FOR VALUES IN ('pending', 'paid');
CREATE TABLE tgm_split_closed PARTITION OF tgm_split FOR VALUES IN ('shipped', 'cancelled');
INSERT INTO tgm_split VALUES (1, 'pending'), (2, 'paid'), (3, 'shipped'), (4, 'paid'), (5, 'cancelled');
-- partitioned by region: a move between partitions may keep the status;
-- the key includes the region, for upserts
CREATE TABLE tgm_parcels (id int, region text, status text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE tgm_parcels_eu PARTITION OF tgm_parcels FOR VALUES IN ('eu');
CREATE TABLE tgm_parcels_us PARTITION OF tgm_parcels FOR VALUES IN ('us');
INSERT INTO tgm_parcels VALUES (1, 'eu', 'pending'), (2, 'eu', 'paid'), (3, 'us', 'shipped');

-- the steps, and what each must answer: 'ok', or IK005 for a transition
-- that is not allowed, or for a new row in a state not listed as initial
-- (only where the declaration lists initial states)
CREATE TEMP TABLE tgm_steps (ord int, step text, sql text, expected text, expected_with_initial text,
                             partitioned boolean);
INSERT INTO tgm_steps VALUES
 (1, 'paid > shipped, moves', $$UPDATE tgm_split SET status = 'shipped' WHERE id = 2$$, 'ok', 'ok', true),
 (2, 'pending > shipped, moves', $$UPDATE tgm_split SET status = 'shipped' WHERE id = 1$$, 'IK005', 'IK005', true),
 (3, 'shipped > pending, moves back', $$UPDATE tgm_split SET status = 'pending' WHERE id = 3$$, 'IK005', 'IK005', true),
 (4, 'pending > cancelled, moves', $$UPDATE tgm_split SET status = 'cancelled' WHERE id = 1$$, 'ok', 'ok', true),
 (5, 'pending > paid, stays', $$UPDATE tgm_split SET status = 'paid' WHERE id = 1$$, 'ok', 'ok', true),
 (6, 'paid > pending, stays', $$UPDATE tgm_split SET status = 'pending' WHERE id = 2$$, 'IK005', 'IK005', true),
 (7, 'two rows move, both allowed', $$UPDATE tgm_split SET status = 'shipped' WHERE id IN (2, 4)$$, 'ok', 'ok', true),
 (8, 'two rows move, one refused', $$UPDATE tgm_split SET status = 'shipped' WHERE id IN (1, 2)$$, 'IK005', 'IK005', true),
 (9, 'new row, initial state', $$INSERT INTO tgm_split VALUES (10, 'pending')$$, 'ok', 'ok', true),
 (10, 'new row, not an initial state', $$INSERT INTO tgm_split VALUES (10, 'shipped')$$, 'ok', 'IK005', true),
 (11, 'deleted and inserted again', $$WITH d AS (DELETE FROM tgm_split WHERE id = 3 RETURNING id)
                                         INSERT INTO tgm_split SELECT id, 'shipped' FROM d$$, 'ok', 'IK005', true),
 (12, 'a move and a new row in one statement', $$WITH m AS (UPDATE tgm_split SET status = 'shipped' WHERE id = 2 RETURNING id)
                                         INSERT INTO tgm_split SELECT 10, 'shipped' FROM m$$, 'ok', 'IK005', true),
 (13, 'a move and a new initial row', $$WITH m AS (UPDATE tgm_split SET status = 'shipped' WHERE id = 2 RETURNING id)
                                         INSERT INTO tgm_split SELECT 10, 'pending' FROM m$$, 'ok', 'ok', true),
 (14, 'MERGE moves paid > shipped', $$MERGE INTO tgm_split o USING (VALUES (2)) v(id) ON o.id = v.id
                                         WHEN MATCHED THEN UPDATE SET status = 'shipped'$$, 'ok', 'ok', true),
 (15, 'MERGE moves pending > shipped', $$MERGE INTO tgm_split o USING (VALUES (1)) v(id) ON o.id = v.id
                                         WHEN MATCHED THEN UPDATE SET status = 'shipped'$$, 'IK005', 'IK005', true),
 (16, 'other region, same status', $$UPDATE tgm_parcels SET region = 'us' WHERE id = 2$$, 'ok', 'ok', true),
 (17, 'other region, paid > shipped', $$UPDATE tgm_parcels SET region = 'us', status = 'shipped' WHERE id = 2$$, 'ok', 'ok', true),
 (18, 'other region, pending > shipped', $$UPDATE tgm_parcels SET region = 'us', status = 'shipped' WHERE id = 1$$, 'IK005', 'IK005', true),
 (19, 'other region, shipped > pending', $$UPDATE tgm_parcels SET region = 'eu', status = 'pending' WHERE id = 3$$, 'IK005', 'IK005', true),
 (20, 'upsert pending > paid', $$INSERT INTO tgm_orders VALUES (1, 'paid') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status$$, 'ok', 'ok', false),
 (21, 'upsert paid > pending', $$INSERT INTO tgm_orders VALUES (2, 'pending') ON CONFLICT (id) DO UPDATE SET status = 'pending'$$, 'IK005', 'IK005', false),
 (22, 'upsert pending > shipped', $$INSERT INTO tgm_orders VALUES (1, 'shipped') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status$$, 'IK005', 'IK005', false),
 (23, 'upsert keeps the state', $$INSERT INTO tgm_orders VALUES (2, 'shipped') ON CONFLICT (id) DO UPDATE SET note = 'seen'$$, 'ok', 'ok', false),
 (24, 'upsert inserts paid', $$INSERT INTO tgm_orders VALUES (3, 'paid') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status$$, 'ok', 'IK005', false),
 (25, 'upsert inserts pending', $$INSERT INTO tgm_orders VALUES (3, 'pending') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status$$, 'ok', 'ok', false),
 (26, 'upsert, DO UPDATE WHERE false', $$INSERT INTO tgm_orders VALUES (1, 'shipped') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status WHERE false$$, 'ok', 'ok', false),
 (27, 'DO NOTHING on a row', $$INSERT INTO tgm_orders VALUES (1, 'shipped') ON CONFLICT DO NOTHING$$, 'ok', 'ok', false),
 (28, 'DO NOTHING, inserts shipped', $$INSERT INTO tgm_orders VALUES (3, 'shipped') ON CONFLICT DO NOTHING$$, 'ok', 'IK005', false),
 (29, 'two rows: update and insert', $$INSERT INTO tgm_orders VALUES (1, 'paid'), (3, 'pending') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status$$, 'ok', 'ok', false),
 (30, 'two rows: one refused', $$INSERT INTO tgm_orders VALUES (1, 'paid'), (2, 'pending') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status$$, 'IK005', 'IK005', false),
 (31, 'fresh INSERT paid', $$INSERT INTO tgm_orders VALUES (3, 'paid')$$, 'ok', 'IK005', false),
 (32, 'MERGE updates pending > paid', $$MERGE INTO tgm_orders o USING (VALUES (1, 'paid')) v(id, status) ON o.id = v.id
                                       WHEN MATCHED THEN UPDATE SET status = v.status WHEN NOT MATCHED THEN INSERT VALUES (v.id, v.status)$$, 'ok', 'ok', false),
 (33, 'MERGE updates paid > pending', $$MERGE INTO tgm_orders o USING (VALUES (2, 'pending')) v(id, status) ON o.id = v.id
                                       WHEN MATCHED THEN UPDATE SET status = v.status WHEN NOT MATCHED THEN INSERT VALUES (v.id, v.status)$$, 'IK005', 'IK005', false),
 (34, 'MERGE inserts paid', $$MERGE INTO tgm_orders o USING (VALUES (3, 'paid')) v(id, status) ON o.id = v.id
                                       WHEN MATCHED THEN UPDATE SET status = v.status WHEN NOT MATCHED THEN INSERT VALUES (v.id, v.status)$$, 'ok', 'IK005', false),
 (35, 'partitioned: upsert pending > paid', $$INSERT INTO tgm_parcels VALUES (1, 'eu', 'paid') ON CONFLICT (id, region) DO UPDATE SET status = EXCLUDED.status$$, 'ok', 'ok', true),
 (36, 'partitioned: upsert paid > pending', $$INSERT INTO tgm_parcels VALUES (2, 'eu', 'pending') ON CONFLICT (id, region) DO UPDATE SET status = EXCLUDED.status$$, 'IK005', 'IK005', true),
 (37, 'partitioned: upsert inserts paid', $$INSERT INTO tgm_parcels VALUES (3, 'eu', 'paid') ON CONFLICT (id, region) DO UPDATE SET status = EXCLUDED.status$$, 'ok', 'IK005', true);

-- every declaration the README allows, on the plain table and on the
-- partitioned ones (where AFTER also fires on DELETE, and AFTER UPDATE
-- alone is refused), and those it refuses at every step they make fire
-- (39P01, see transition_guard_declarations)
CREATE TEMP TABLE tgm_declarations (ord int, on_plain text, on_partitioned text, with_initial boolean,
                                    refused_on text);
INSERT INTO tgm_declarations VALUES
 (1, 'BEFORE UPDATE', 'BEFORE UPDATE', false, 'none'),
 (2, 'BEFORE INSERT OR UPDATE', 'BEFORE INSERT OR UPDATE', false, 'none'),
 (3, 'BEFORE INSERT OR UPDATE OR DELETE', 'BEFORE INSERT OR UPDATE OR DELETE', false, 'none'),
 (4, 'AFTER UPDATE', 'AFTER INSERT OR UPDATE OR DELETE', false, 'none'),
 (5, 'AFTER INSERT OR UPDATE', 'AFTER INSERT OR UPDATE OR DELETE', false, 'none'),
 (6, 'AFTER INSERT OR UPDATE', 'AFTER INSERT OR UPDATE OR DELETE', true, 'none'),
 (7, 'AFTER INSERT OR UPDATE', 'AFTER INSERT OR UPDATE', true, 'partitioned'),
 (8, 'BEFORE INSERT OR UPDATE', 'BEFORE INSERT OR UPDATE', true, 'all');

CREATE FUNCTION pg_temp.run(d tgm_declarations) RETURNS TABLE (step text, answer text, expected text)
LANGUAGE plpgsql AS $$
DECLARE
    args text := $a$'status', 'pending>paid', 'paid>shipped', 'pending>cancelled'$a$;
    refused_at_create boolean := false;
BEGIN
    IF d.with_initial THEN
        args := args || $a$, '>pending'$a$;
    END IF;
    EXECUTE format('CREATE TRIGGER tgm_guard %s ON tgm_orders FOR EACH ROW EXECUTE FUNCTION idem_transition_guard(%s)',
                   d.on_plain, args);
    -- a declaration that PostgreSQL would not fire for a move is refused
    -- when it is created: its steps answer that refusal
    BEGIN
        EXECUTE format('CREATE TRIGGER tgm_guard %s ON tgm_split FOR EACH ROW EXECUTE FUNCTION idem_transition_guard(%s)',
                       d.on_partitioned, args);
        EXECUTE format('CREATE TRIGGER tgm_guard %s ON tgm_parcels FOR EACH ROW EXECUTE FUNCTION idem_transition_guard(%s)',
                       d.on_partitioned, args);
    EXCEPTION WHEN SQLSTATE '39P01' THEN
        refused_at_create := true;
    END;
    RETURN QUERY
        SELECT s.step,
               CASE WHEN refused_at_create AND s.partitioned THEN '39P01' ELSE pg_temp.try(s.sql) END,
               CASE WHEN d.refused_on = 'all' OR (d.refused_on = 'partitioned' AND s.partitioned) THEN '39P01'
                    WHEN d.with_initial THEN s.expected_with_initial ELSE s.expected END
          FROM tgm_steps s ORDER BY s.ord;
    DROP TRIGGER tgm_guard ON tgm_orders;
    IF NOT refused_at_create THEN
        DROP TRIGGER tgm_guard ON tgm_split;
        DROP TRIGGER tgm_guard ON tgm_parcels;
    END IF;
END $$;

-- per declaration: the steps that were not 'ok', and every answer that
-- differs from what it must be (none)
SELECT d.on_plain || ' | ' || d.on_partitioned || CASE WHEN d.with_initial THEN ', initial states' ELSE '' END AS declaration,
       count(*) AS steps, count(*) FILTER (WHERE r.answer <> 'ok') AS not_ok,
       string_agg(r.step || ': ' || r.answer, '; ') FILTER (WHERE r.answer IS DISTINCT FROM r.expected) AS wrong
  FROM tgm_declarations d, LATERAL pg_temp.run(d) r
 GROUP BY d.ord, d.on_plain, d.on_partitioned, d.with_initial ORDER BY d.ord;

-- a move between partitions: the case, with its messages (the edge, from
-- the old row's state)
CREATE TRIGGER tgm_guard AFTER INSERT OR UPDATE OR DELETE ON tgm_split FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', '>pending', 'pending>paid', 'paid>shipped', 'pending>cancelled');
UPDATE tgm_split SET status = 'pending' WHERE id = 3;
:sqlstate
INSERT INTO tgm_split VALUES (11, 'shipped');
:sqlstate
-- a trigger that inserts into the same table while a row moves (between
-- the move's DELETE and INSERT): its new row is a new row, the move a move
CREATE FUNCTION tgm_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tgm_split VALUES (OLD.id + 100, TG_ARGV[0]);
    RETURN NULL;
END $$;
CREATE TRIGGER tgm_guard_0_audit AFTER DELETE ON tgm_split_open FOR EACH ROW
    EXECUTE FUNCTION tgm_audit('shipped');
UPDATE tgm_split SET status = 'shipped' WHERE id = 2;
:sqlstate
DROP TRIGGER tgm_guard_0_audit ON tgm_split_open;
CREATE TRIGGER tgm_guard_0_audit AFTER DELETE ON tgm_split_open FOR EACH ROW
    EXECUTE FUNCTION tgm_audit('pending');
UPDATE tgm_split SET status = 'shipped' WHERE id = 2;
UPDATE tgm_split SET status = 'shipped' WHERE id = 1;
:sqlstate
DROP TRIGGER tgm_guard_0_audit ON tgm_split_open;
SELECT tableoid::regclass AS partition, id, status FROM tgm_split ORDER BY id;
-- a row moved in a subtransaction that rolls back leaves nothing behind
BEGIN;
SAVEPOINT s;
UPDATE tgm_split SET status = 'shipped' WHERE id = 4;
ROLLBACK TO SAVEPOINT s;
INSERT INTO tgm_split VALUES (12, 'shipped');
:sqlstate
ROLLBACK;
-- a deferred constraint trigger checks at COMMIT, moves included
DROP TRIGGER tgm_guard ON tgm_split;
CREATE CONSTRAINT TRIGGER tgm_guard AFTER INSERT OR UPDATE OR DELETE ON tgm_split
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', '>pending', 'pending>paid', 'paid>shipped', 'pending>cancelled');
BEGIN;
UPDATE tgm_split SET status = 'shipped' WHERE id = 4;
UPDATE tgm_split SET status = 'cancelled' WHERE id = 1;
COMMIT;
BEGIN;
UPDATE tgm_split SET status = 'pending' WHERE id = 4;
INSERT INTO tgm_split VALUES (13, 'pending');
COMMIT;
:sqlstate
SELECT tableoid::regclass AS partition, id, status FROM tgm_split ORDER BY id;

-- an upsert: the case, with its messages
CREATE TRIGGER tgm_guard AFTER INSERT OR UPDATE ON tgm_orders FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', '>pending', 'pending>paid', 'paid>shipped');
INSERT INTO tgm_orders VALUES (1, 'paid') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status;
INSERT INTO tgm_orders VALUES (1, 'pending') ON CONFLICT (id) DO UPDATE SET status = 'pending';
:sqlstate
INSERT INTO tgm_orders VALUES (3, 'paid');
:sqlstate
SELECT id, status FROM tgm_orders ORDER BY id;

DROP TABLE tgm_orders, tgm_split, tgm_parcels;
DROP FUNCTION tgm_audit();
