-- idem_transition_guard refuses a declaration under which some write of the
-- column would escape it (README "idem_transition_guard"): the first write
-- that fires it fails with 39P01, naming the trigger and the table, and
-- changes nothing (two such declarations are refused already at CREATE
-- TRIGGER, by the event trigger idem_guard_declarations).  The declarations
-- allowed are proven in transition_guard_moves_upserts.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
CREATE TABLE tgd_orders (id int PRIMARY KEY, status text);
INSERT INTO tgd_orders VALUES (1, 'pending');

-- initial states with BEFORE: a BEFORE INSERT trigger sees the row an
-- upsert proposes before PostgreSQL knows whether it inserts it, so the
-- allowed edge pending > paid of an upsert would be refused as an initial
-- state
CREATE TRIGGER tgd_guard BEFORE INSERT OR UPDATE ON tgd_orders FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', '>pending', 'pending>paid', 'paid>shipped');
INSERT INTO tgd_orders VALUES (1, 'paid') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status;
:sqlstate
UPDATE tgd_orders SET status = 'paid';
:sqlstate
DROP TRIGGER tgd_guard ON tgd_orders;
-- initial states on a trigger that does not fire on INSERT
CREATE TRIGGER tgd_guard BEFORE UPDATE ON tgd_orders FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', '>pending', 'pending>paid');
UPDATE tgd_orders SET status = 'paid';
:sqlstate
DROP TRIGGER tgd_guard ON tgd_orders;
CREATE TRIGGER tgd_guard AFTER UPDATE ON tgd_orders FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', '>pending', 'pending>paid');
UPDATE tgd_orders SET status = 'paid';
:sqlstate
DROP TRIGGER tgd_guard ON tgd_orders;
-- not on UPDATE: no edge would be checked
CREATE TRIGGER tgd_guard BEFORE INSERT ON tgd_orders FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'pending>paid');
INSERT INTO tgd_orders VALUES (2, 'pending');
:sqlstate
DROP TRIGGER tgd_guard ON tgd_orders;
CREATE TRIGGER tgd_guard AFTER INSERT ON tgd_orders FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', '>pending', 'pending>paid');
INSERT INTO tgd_orders VALUES (2, 'pending');
:sqlstate
DROP TRIGGER tgd_guard ON tgd_orders;
CREATE TRIGGER tgd_guard BEFORE DELETE ON tgd_orders FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'pending>paid');
DELETE FROM tgd_orders;
:sqlstate
DROP TRIGGER tgd_guard ON tgd_orders;
-- statement level
CREATE TRIGGER tgd_guard AFTER UPDATE ON tgd_orders FOR EACH STATEMENT
    EXECUTE FUNCTION idem_transition_guard('status', 'pending>paid');
UPDATE tgd_orders SET status = 'shipped';
:sqlstate
DROP TRIGGER tgd_guard ON tgd_orders;
-- INSTEAD OF on a view: the trigger would replace the write
CREATE VIEW tgd_orders_view AS SELECT id, status FROM tgd_orders;
CREATE TRIGGER tgd_guard INSTEAD OF UPDATE ON tgd_orders_view FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'pending>paid');
UPDATE tgd_orders_view SET status = 'shipped';
:sqlstate
DROP VIEW tgd_orders_view;
-- nothing was written by any of them
SELECT id, status FROM tgd_orders ORDER BY id;

-- partitioned tables
CREATE TABLE tgd_parcels (id int, region text, status text) PARTITION BY LIST (region);
CREATE TABLE tgd_parcels_eu PARTITION OF tgd_parcels FOR VALUES IN ('eu');
CREATE TABLE tgd_parcels_us PARTITION OF tgd_parcels FOR VALUES IN ('us') PARTITION BY LIST (status);
CREATE TABLE tgd_parcels_us_open PARTITION OF tgd_parcels_us FOR VALUES IN ('pending', 'paid');
CREATE TABLE tgd_parcels_us_done PARTITION OF tgd_parcels_us FOR VALUES IN ('shipped');
INSERT INTO tgd_parcels VALUES (1, 'eu', 'pending'), (2, 'us', 'paid');
-- AFTER without DELETE (or without INSERT): an UPDATE that moves a row
-- fires DELETE and INSERT, not UPDATE, so the trigger would not even fire
-- to be refused: refused when it is created (the event trigger
-- idem_guard_declarations), and nothing is created
CREATE TRIGGER tgd_guard AFTER INSERT OR UPDATE ON tgd_parcels FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'pending>paid', 'paid>shipped');
:sqlstate
CREATE TRIGGER tgd_guard AFTER UPDATE OR DELETE ON tgd_parcels FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'pending>paid', 'paid>shipped');
:sqlstate
CREATE TRIGGER tgd_guard AFTER UPDATE ON tgd_parcels FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'pending>paid', 'paid>shipped');
:sqlstate
-- declared on a partition, or on a partitioned partition: rows move into
-- and out of it unseen; refused when it is created
CREATE TRIGGER tgd_guard BEFORE UPDATE ON tgd_parcels_eu FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'pending>paid', 'paid>shipped');
:sqlstate
CREATE TRIGGER tgd_guard BEFORE UPDATE ON tgd_parcels_us FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'pending>paid', 'paid>shipped');
:sqlstate
SELECT count(*) AS guards_created FROM pg_trigger WHERE tgname = 'tgd_guard';
-- ... also a table attached as a partition with a trigger of its own,
-- next to the clone of the partitioned table's trigger
CREATE TRIGGER tgd_guard BEFORE UPDATE ON tgd_parcels FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'pending>paid', 'paid>shipped');
CREATE TABLE tgd_parcels_asia (id int, region text, status text);
CREATE TRIGGER tgd_asia_guard BEFORE UPDATE ON tgd_parcels_asia FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'pending>paid');
ALTER TABLE tgd_parcels ATTACH PARTITION tgd_parcels_asia FOR VALUES IN ('asia');
INSERT INTO tgd_parcels VALUES (3, 'asia', 'pending');
UPDATE tgd_parcels SET status = 'paid' WHERE id = 3;
:sqlstate
-- the trigger declared on the partitioned table is fine on every level
DROP TRIGGER tgd_asia_guard ON tgd_parcels_asia;
UPDATE tgd_parcels SET status = 'paid' WHERE id IN (1, 3);
UPDATE tgd_parcels SET status = 'shipped' WHERE id = 2;
UPDATE tgd_parcels SET status = 'pending' WHERE id = 2;
:sqlstate
DROP TRIGGER tgd_guard ON tgd_parcels;
SELECT tableoid::regclass AS partition, id, status FROM tgd_parcels ORDER BY id;

-- an AFTER trigger and a foreign table partition: the row that an UPDATE
-- moves into it is not a heap tuple, and cannot be matched with the row it
-- was (postgres_fdw to this database; the WHERE clause keeps the foreign
-- partition out of the rows updated, so that rows may be routed into it).
-- A server without the postgres_fdw contrib module skips it, and answers
-- expected/transition_guard_declarations_1.out
SELECT count(*) > 0 AS have_postgres_fdw FROM pg_available_extensions WHERE name = 'postgres_fdw' \gset
\if :have_postgres_fdw
CREATE EXTENSION postgres_fdw;
DO $$
BEGIN
    EXECUTE format('CREATE SERVER tgd_loopback FOREIGN DATA WRAPPER postgres_fdw OPTIONS (dbname %L, port %L, host %L)',
                   current_database(), current_setting('port'),
                   split_part(current_setting('unix_socket_directories'), ',', 1));
END $$;
CREATE USER MAPPING FOR CURRENT_USER SERVER tgd_loopback;
CREATE TABLE tgd_far_rows (id int, region text, status text);
CREATE FOREIGN TABLE tgd_parcels_far PARTITION OF tgd_parcels FOR VALUES IN ('far')
    SERVER tgd_loopback OPTIONS (table_name 'tgd_far_rows');
CREATE TRIGGER tgd_guard AFTER INSERT OR UPDATE OR DELETE ON tgd_parcels FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'pending>paid', 'paid>shipped');
UPDATE tgd_parcels SET region = 'far' WHERE region = 'eu' AND id = 1;
:sqlstate
DROP TRIGGER tgd_guard ON tgd_parcels;
-- BEFORE UPDATE sees such a move as an update
CREATE TRIGGER tgd_guard BEFORE UPDATE ON tgd_parcels FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'pending>paid', 'paid>shipped');
UPDATE tgd_parcels SET region = 'far', status = 'pending' WHERE region = 'eu' AND id = 1;
:sqlstate
UPDATE tgd_parcels SET region = 'far', status = 'shipped' WHERE region = 'eu' AND id = 1;
SELECT tableoid::regclass AS partition, id, status FROM tgd_parcels ORDER BY id;
DROP FOREIGN TABLE tgd_parcels_far;
DROP TABLE tgd_far_rows;
DROP EXTENSION postgres_fdw CASCADE;
\else
\echo 'skipped: the postgres_fdw contrib module is not installed into this server (a foreign table partition needs it)'
\endif

DROP TABLE tgd_orders, tgd_parcels;
