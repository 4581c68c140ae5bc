-- idem_transition_guard and INSERT ... ON CONFLICT DO UPDATE (README
-- "idem_transition_guard"): an upsert that updates an existing row is a
-- transition from that row's state, one that inserts is a new row, and one
-- that does nothing is nothing; MERGE likewise.  For every declaration the
-- README allows.  Every step runs in a subtransaction that is rolled back,
-- so each starts from the same rows.
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

CREATE TABLE tgu_orders (id int PRIMARY KEY, status text, note text);
INSERT INTO tgu_orders VALUES (1, 'pending'), (2, 'paid');
-- the same on a partitioned table (by region; the key includes it)
CREATE TABLE tgu_parcels (id int, region text, status text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE tgu_parcels_eu PARTITION OF tgu_parcels FOR VALUES IN ('eu');
CREATE TABLE tgu_parcels_us PARTITION OF tgu_parcels FOR VALUES IN ('us');
INSERT INTO tgu_parcels VALUES (1, 'eu', 'pending'), (2, 'us', 'paid');

-- the steps, and what each must answer ('ok', or IK005); a new row in a
-- state not listed as initial is refused only where initial states are
CREATE TEMP TABLE tgu_steps (ord int, step text, sql text, expected text, expected_with_initial text);
INSERT INTO tgu_steps VALUES
 (1, 'upsert pending > paid', $$INSERT INTO tgu_orders VALUES (1, 'paid') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status$$, 'ok', 'ok'),
 (2, 'upsert paid > pending', $$INSERT INTO tgu_orders VALUES (2, 'pending') ON CONFLICT (id) DO UPDATE SET status = 'pending'$$, 'IK005', 'IK005'),
 (3, 'upsert pending > shipped', $$INSERT INTO tgu_orders VALUES (1, 'shipped') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status$$, 'IK005', 'IK005'),
 (4, 'upsert keeps the state', $$INSERT INTO tgu_orders VALUES (2, 'shipped') ON CONFLICT (id) DO UPDATE SET note = 'seen'$$, 'ok', 'ok'),
 (5, 'upsert inserts paid', $$INSERT INTO tgu_orders VALUES (3, 'paid') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status$$, 'ok', 'IK005'),
 (6, 'upsert inserts pending', $$INSERT INTO tgu_orders VALUES (3, 'pending') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status$$, 'ok', 'ok'),
 (7, 'upsert, DO UPDATE WHERE false', $$INSERT INTO tgu_orders VALUES (1, 'shipped') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status WHERE false$$, 'ok', 'ok'),
 (8, 'DO NOTHING on a row', $$INSERT INTO tgu_orders VALUES (1, 'shipped') ON CONFLICT DO NOTHING$$, 'ok', 'ok'),
 (9, 'DO NOTHING, inserts shipped', $$INSERT INTO tgu_orders VALUES (3, 'shipped') ON CONFLICT DO NOTHING$$, 'ok', 'IK005'),
 (10, 'two rows: update and insert', $$INSERT INTO tgu_orders VALUES (1, 'paid'), (3, 'pending') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status$$, 'ok', 'ok'),
 (11, 'two rows: one refused', $$INSERT INTO tgu_orders VALUES (1, 'paid'), (2, 'pending') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status$$, 'IK005', 'IK005'),
 (12, 'fresh INSERT paid', $$INSERT INTO tgu_orders VALUES (3, 'paid')$$, 'ok', 'IK005'),
 (13, 'MERGE updates pending > paid', $$MERGE INTO tgu_orders o USING (VALUES (1, 'paid')) v(id, status) ON o.id = v.id
                                       WHEN MATCHED THEN UPDATE SET status = v.status WHEN NOT MATCHED THEN INSERT VALUES (v.id, v.status)$$, 'ok', 'ok'),
 (14, 'MERGE updates paid > pending', $$MERGE INTO tgu_orders o USING (VALUES (2, 'pending')) v(id, status) ON o.id = v.id
                                       WHEN MATCHED THEN UPDATE SET status = v.status WHEN NOT MATCHED THEN INSERT VALUES (v.id, v.status)$$, 'IK005', 'IK005'),
 (15, 'MERGE inserts paid', $$MERGE INTO tgu_orders o USING (VALUES (3, 'paid')) v(id, status) ON o.id = v.id
                                       WHEN MATCHED THEN UPDATE SET status = v.status WHEN NOT MATCHED THEN INSERT VALUES (v.id, v.status)$$, 'ok', 'IK005'),
 (16, 'partitioned: upsert pending > paid', $$INSERT INTO tgu_parcels VALUES (1, 'eu', 'paid') ON CONFLICT (id, region) DO UPDATE SET status = EXCLUDED.status$$, 'ok', 'ok'),
 (17, 'partitioned: upsert paid > pending', $$INSERT INTO tgu_parcels VALUES (2, 'us', 'pending') ON CONFLICT (id, region) DO UPDATE SET status = EXCLUDED.status$$, 'IK005', 'IK005'),
 (18, 'partitioned: upsert inserts paid', $$INSERT INTO tgu_parcels VALUES (3, 'eu', 'paid') ON CONFLICT (id, region) DO UPDATE SET status = EXCLUDED.status$$, 'ok', 'IK005');

-- every declaration the README allows; on the partitioned table an AFTER
-- trigger also fires on DELETE
CREATE TEMP TABLE tgu_declarations (ord int, declaration text, with_initial boolean, refused boolean DEFAULT false);
INSERT INTO tgu_declarations VALUES
 (1, 'BEFORE UPDATE', false, false),
 (2, 'BEFORE INSERT OR UPDATE', false, false),
 (3, 'AFTER UPDATE', false, false),
 (4, 'AFTER INSERT OR UPDATE', false, false),
 (5, 'AFTER INSERT OR UPDATE', true, false),
-- ... and one it refuses, at every step (39P01, see
-- transition_guard_declarations): initial states with BEFORE
 (6, 'BEFORE INSERT OR UPDATE', true, true);

CREATE FUNCTION pg_temp.run(d tgu_declarations) RETURNS TABLE (step text, answer text, expected text)
LANGUAGE plpgsql AS $$
DECLARE
    args text := $a$'status', 'pending>paid', 'paid>shipped'$a$;
    on_partitions text := d.declaration;
BEGIN
    IF d.with_initial THEN
        args := args || $a$, '>pending'$a$;
    END IF;
    IF d.declaration LIKE 'AFTER%' THEN
        on_partitions := 'AFTER INSERT OR UPDATE OR DELETE';
    END IF;
    EXECUTE format('CREATE TRIGGER tgu_guard %s ON tgu_orders FOR EACH ROW EXECUTE FUNCTION idem_transition_guard(%s)',
                   d.declaration, args);
    EXECUTE format('CREATE TRIGGER tgu_guard %s ON tgu_parcels FOR EACH ROW EXECUTE FUNCTION idem_transition_guard(%s)',
                   on_partitions, args);
    RETURN QUERY
        SELECT s.step, pg_temp.try(s.sql),
               CASE WHEN d.refused THEN '39P01'
                    WHEN d.with_initial THEN s.expected_with_initial ELSE s.expected END
          FROM tgu_steps s ORDER BY s.ord;
    DROP TRIGGER tgu_guard ON tgu_orders;
    DROP TRIGGER tgu_guard ON tgu_parcels;
END $$;

-- per declaration: the steps refused, and every answer that differs from
-- what it must be (none)
SELECT d.declaration || CASE WHEN d.with_initial THEN ', initial states' ELSE '' END AS declaration,
       count(*) AS steps, count(*) FILTER (WHERE r.answer <> 'ok') AS refused,
       string_agg(r.step || ': ' || r.answer, '; ') FILTER (WHERE r.answer IS DISTINCT FROM r.expected) AS wrong
  FROM tgu_declarations d, LATERAL pg_temp.run(d) r
 GROUP BY d.ord, d.declaration, d.with_initial ORDER BY d.ord;

-- the shapes of the case, with their messages
CREATE TRIGGER tgu_guard AFTER INSERT OR UPDATE ON tgu_orders FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', '>pending', 'pending>paid', 'paid>shipped');
INSERT INTO tgu_orders VALUES (1, 'paid') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status;
INSERT INTO tgu_orders VALUES (1, 'pending') ON CONFLICT (id) DO UPDATE SET status = 'pending';
:sqlstate
INSERT INTO tgu_orders VALUES (3, 'paid');
:sqlstate
SELECT id, status FROM tgu_orders ORDER BY id;

DROP TABLE tgu_orders, tgu_parcels;
