-- idem_transition_guard on partitioned tables (README
-- "idem_transition_guard"): an UPDATE that moves a row to another partition
-- is a transition like any other, whichever declaration the README allows.
-- A BEFORE UPDATE trigger sees the move as an update on the old partition;
-- an AFTER trigger sees the DELETE and the INSERT of the move, and tells
-- them from a row deleted and a row inserted.  Every step runs in a
-- subtransaction that is rolled back, so each starts from the same rows.
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

-- partitioned by status: pending and paid in one partition, shipped and
-- cancelled in the other
CREATE TABLE tgp_orders (id int, status text, note text) PARTITION BY LIST (status);
CREATE TABLE tgp_open PARTITION OF tgp_orders FOR VALUES IN ('pending', 'paid');
CREATE TABLE tgp_closed PARTITION OF tgp_orders FOR VALUES IN ('shipped', 'cancelled');
-- partitioned by region: a move between partitions may keep the status
CREATE TABLE tgp_parcels (id int, region text, status text) PARTITION BY LIST (region);
CREATE TABLE tgp_parcels_eu PARTITION OF tgp_parcels FOR VALUES IN ('eu');
CREATE TABLE tgp_parcels_us PARTITION OF tgp_parcels FOR VALUES IN ('us');
INSERT INTO tgp_orders VALUES (1, 'pending'), (2, 'paid'), (3, 'shipped'), (4, 'paid'), (5, 'cancelled');
INSERT INTO tgp_parcels VALUES (1, 'eu', 'pending'), (2, 'eu', 'paid'), (3, 'us', 'shipped');

-- the steps, and what each must answer: 'ok', or IK005 for a transition
-- that is not allowed, or for a new row in a state not listed as initial
-- (only where the declaration lists initial states)
CREATE TEMP TABLE tgp_steps (ord int, step text, sql text, expected text, expected_with_initial text);
INSERT INTO tgp_steps VALUES
 (1, 'paid > shipped, moves', $$UPDATE tgp_orders SET status = 'shipped' WHERE id = 2$$, 'ok', 'ok'),
 (2, 'pending > shipped, moves', $$UPDATE tgp_orders SET status = 'shipped' WHERE id = 1$$, 'IK005', 'IK005'),
 (3, 'shipped > pending, moves back', $$UPDATE tgp_orders SET status = 'pending' WHERE id = 3$$, 'IK005', 'IK005'),
 (4, 'pending > cancelled, moves', $$UPDATE tgp_orders SET status = 'cancelled' WHERE id = 1$$, 'ok', 'ok'),
 (5, 'pending > paid, stays', $$UPDATE tgp_orders SET status = 'paid' WHERE id = 1$$, 'ok', 'ok'),
 (6, 'paid > pending, stays', $$UPDATE tgp_orders SET status = 'pending' WHERE id = 2$$, 'IK005', 'IK005'),
 (7, 'two rows move, both allowed', $$UPDATE tgp_orders SET status = 'shipped' WHERE id IN (2, 4)$$, 'ok', 'ok'),
 (8, 'two rows move, one refused', $$UPDATE tgp_orders SET status = 'shipped' WHERE id IN (1, 2)$$, 'IK005', 'IK005'),
 (9, 'new row, initial state', $$INSERT INTO tgp_orders VALUES (10, 'pending')$$, 'ok', 'ok'),
 (10, 'new row, not an initial state', $$INSERT INTO tgp_orders VALUES (10, 'shipped')$$, 'ok', 'IK005'),
 (11, 'deleted and inserted again', $$WITH d AS (DELETE FROM tgp_orders WHERE id = 3 RETURNING id)
                                         INSERT INTO tgp_orders SELECT id, 'shipped' FROM d$$, 'ok', 'IK005'),
 (12, 'a move and a new row in one statement', $$WITH m AS (UPDATE tgp_orders SET status = 'shipped' WHERE id = 2 RETURNING id)
                                         INSERT INTO tgp_orders SELECT 10, 'shipped' FROM m$$, 'ok', 'IK005'),
 (13, 'a move and a new initial row', $$WITH m AS (UPDATE tgp_orders SET status = 'shipped' WHERE id = 2 RETURNING id)
                                         INSERT INTO tgp_orders SELECT 10, 'pending' FROM m$$, 'ok', 'ok'),
 (14, 'MERGE moves paid > shipped', $$MERGE INTO tgp_orders o USING (VALUES (2)) v(id) ON o.id = v.id
                                         WHEN MATCHED THEN UPDATE SET status = 'shipped'$$, 'ok', 'ok'),
 (15, 'MERGE moves pending > shipped', $$MERGE INTO tgp_orders o USING (VALUES (1)) v(id) ON o.id = v.id
                                         WHEN MATCHED THEN UPDATE SET status = 'shipped'$$, 'IK005', 'IK005'),
 (17, 'other region, same status', $$UPDATE tgp_parcels SET region = 'us' WHERE id = 2$$, 'ok', 'ok'),
 (18, 'other region, paid > shipped', $$UPDATE tgp_parcels SET region = 'us', status = 'shipped' WHERE id = 2$$, 'ok', 'ok'),
 (19, 'other region, pending > shipped', $$UPDATE tgp_parcels SET region = 'us', status = 'shipped' WHERE id = 1$$, 'IK005', 'IK005'),
 (20, 'other region, shipped > pending', $$UPDATE tgp_parcels SET region = 'eu', status = 'pending' WHERE id = 3$$, 'IK005', 'IK005');

-- every declaration the README allows on a partitioned table
CREATE TEMP TABLE tgp_declarations (ord int, declaration text, with_initial boolean, refused boolean DEFAULT false);
INSERT INTO tgp_declarations VALUES
 (1, 'BEFORE UPDATE', false, false),
 (2, 'BEFORE INSERT OR UPDATE', false, false),
 (3, 'BEFORE INSERT OR UPDATE OR DELETE', false, false),
 (4, 'AFTER INSERT OR UPDATE OR DELETE', false, false),
 (5, 'AFTER INSERT OR UPDATE OR DELETE', true, false),
-- ... and two it refuses, at every step (39P01, see
-- transition_guard_declarations)
 (6, 'AFTER INSERT OR UPDATE', true, true),
 (7, 'BEFORE INSERT OR UPDATE', true, true);

CREATE FUNCTION pg_temp.run(d tgp_declarations) RETURNS TABLE (step text, answer text, expected text)
LANGUAGE plpgsql AS $$
DECLARE
    args text := $a$'status', 'pending>paid', 'paid>shipped', 'pending>cancelled'$a$;
BEGIN
    IF d.with_initial THEN
        args := args || $a$, '>pending'$a$;
    END IF;
    EXECUTE format('CREATE TRIGGER tgp_guard %s ON tgp_orders FOR EACH ROW EXECUTE FUNCTION idem_transition_guard(%s)',
                   d.declaration, args);
    EXECUTE format('CREATE TRIGGER tgp_guard %s ON tgp_parcels FOR EACH ROW EXECUTE FUNCTION idem_transition_guard(%s)',
                   d.declaration, args);
    RETURN QUERY
        SELECT s.step, pg_temp.try(s.sql),
               CASE WHEN d.refused THEN '39P01'
                    WHEN d.with_initial THEN s.expected_with_initial ELSE s.expected END
          FROM tgp_steps s ORDER BY s.ord;
    DROP TRIGGER tgp_guard ON tgp_orders;
    DROP TRIGGER tgp_guard ON tgp_parcels;
END $$;

-- per declaration: the steps refused, and every answer that differs from
-- what it must be (none)
SELECT d.declaration || CASE WHEN d.with_initial THEN ', initial states' ELSE '' END AS declaration,
       count(*) AS steps, count(*) FILTER (WHERE r.answer <> 'ok') AS refused,
       string_agg(r.step || ': ' || r.answer, '; ') FILTER (WHERE r.answer IS DISTINCT FROM r.expected) AS wrong
  FROM tgp_declarations d, LATERAL pg_temp.run(d) r
 GROUP BY d.ord, d.declaration, d.with_initial ORDER BY d.ord;

-- the messages of a refused move: the edge, from the old row's state
CREATE TRIGGER tgp_guard AFTER INSERT OR UPDATE OR DELETE ON tgp_orders FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', '>pending', 'pending>paid', 'paid>shipped', 'pending>cancelled');
UPDATE tgp_orders SET status = 'pending' WHERE id = 3;
:sqlstate
INSERT INTO tgp_orders VALUES (11, 'shipped');
:sqlstate
-- a trigger that inserts into the same table while a row moves (between
-- the move's DELETE and INSERT): its new row is a new row, the move a move
CREATE FUNCTION pg_temp.tgp_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tgp_orders VALUES (OLD.id + 100, TG_ARGV[0]);
    RETURN NULL;
END $$;
CREATE TRIGGER tgp_guard_0_audit AFTER DELETE ON tgp_open FOR EACH ROW
    EXECUTE FUNCTION pg_temp.tgp_audit('shipped');
UPDATE tgp_orders SET status = 'shipped' WHERE id = 2;
:sqlstate
DROP TRIGGER tgp_guard_0_audit ON tgp_open;
CREATE TRIGGER tgp_guard_0_audit AFTER DELETE ON tgp_open FOR EACH ROW
    EXECUTE FUNCTION pg_temp.tgp_audit('pending');
UPDATE tgp_orders SET status = 'shipped' WHERE id = 2;
UPDATE tgp_orders SET status = 'shipped' WHERE id = 1;
:sqlstate
DROP TRIGGER tgp_guard_0_audit ON tgp_open;
SELECT tableoid::regclass AS partition, id, status FROM tgp_orders ORDER BY id;
-- a row moved in a subtransaction that rolls back leaves nothing behind
BEGIN;
SAVEPOINT s;
UPDATE tgp_orders SET status = 'shipped' WHERE id = 4;
ROLLBACK TO SAVEPOINT s;
INSERT INTO tgp_orders VALUES (12, 'shipped');
:sqlstate
ROLLBACK;
-- a deferred constraint trigger checks at COMMIT, moves included
DROP TRIGGER tgp_guard ON tgp_orders;
CREATE CONSTRAINT TRIGGER tgp_guard AFTER INSERT OR UPDATE OR DELETE ON tgp_orders
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', '>pending', 'pending>paid', 'paid>shipped', 'pending>cancelled');
BEGIN;
UPDATE tgp_orders SET status = 'shipped' WHERE id = 4;
UPDATE tgp_orders SET status = 'cancelled' WHERE id = 1;
COMMIT;
BEGIN;
UPDATE tgp_orders SET status = 'pending' WHERE id = 4;
INSERT INTO tgp_orders VALUES (13, 'pending');
COMMIT;
:sqlstate
SELECT tableoid::regclass AS partition, id, status FROM tgp_orders ORDER BY id;

DROP TABLE tgp_orders, tgp_parcels;
