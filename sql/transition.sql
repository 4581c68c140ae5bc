-- idem_transition: compare-and-set of a status column (README "idem_transition").
-- Outcomes applied / already / rejected / not_found; text, varchar and enum
-- status columns; integer, bigint, uuid and text keys; every error with its
-- SQLSTATE; injection attempts; privileges and row level security.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'

CREATE TYPE tr_order_status AS ENUM ('pending', 'paid', 'shipped', 'cancelled');
CREATE TABLE tr_orders (
    id     integer PRIMARY KEY,
    status tr_order_status NOT NULL,
    note   text
);
INSERT INTO tr_orders VALUES (1, 'pending'), (2, 'paid'), (3, 'cancelled');

-------------------------------------------------------------------------------
-- The four outcomes (enum column, integer key)
-------------------------------------------------------------------------------
-- applied: the row was in an allowed state and moves
SELECT idem_transition('tr_orders', 1, 'paid', ARRAY['pending']);
-- already: the row is in the target state; idempotent success, nothing written
SELECT xmin AS xmin_before FROM tr_orders WHERE id = 1 \gset
SELECT idem_transition('tr_orders', 1, 'paid', ARRAY['pending']);
SELECT xmin = :'xmin_before' AS not_rewritten FROM tr_orders WHERE id = 1;
-- rejected: the row is in a state outside from_states; nothing written
SELECT idem_transition('tr_orders', 3, 'paid', ARRAY['pending']);
-- not_found: no row has that key
SELECT idem_transition('tr_orders', 42, 'paid', ARRAY['pending']);
-- several from_states; "already" wins even if to_state is also listed
SELECT idem_transition('tr_orders', 2, 'shipped', ARRAY['pending', 'paid']);
SELECT idem_transition('tr_orders', 2, 'shipped', ARRAY['paid', 'shipped']);
-- an empty from_states only answers already or rejected
SELECT idem_transition('tr_orders', 2, 'shipped', '{}');
SELECT idem_transition('tr_orders', 2, 'paid', '{}');
SELECT id, status FROM tr_orders ORDER BY id;

-- the move is part of the caller's transaction and rolls back with it
BEGIN;
SELECT idem_transition('tr_orders', 3, 'pending', ARRAY['cancelled']);
ROLLBACK;
SELECT status FROM tr_orders WHERE id = 3;

-------------------------------------------------------------------------------
-- Key types: bigint, uuid, text; an id of another type
-------------------------------------------------------------------------------
CREATE TABLE tr_big (id bigint PRIMARY KEY, status text NOT NULL);
INSERT INTO tr_big VALUES (9000000000, 'new');
SELECT idem_transition('tr_big', 9000000000, 'done', ARRAY['new']);
-- an integer reaches a bigint key by its implicit cast
INSERT INTO tr_big VALUES (7, 'new');
SELECT idem_transition('tr_big', 7, 'done', ARRAY['new']);

CREATE TABLE tr_uuid (id uuid PRIMARY KEY, status varchar(12) NOT NULL);
INSERT INTO tr_uuid VALUES ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'new');
SELECT idem_transition('tr_uuid', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, 'done', ARRAY['new']);
-- a quoted literal is text and is read as the key's type, as in WHERE id = '...'
SELECT idem_transition('tr_uuid', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'done', ARRAY['new']);
SELECT idem_transition('tr_uuid', 'not-a-uuid', 'done', ARRAY['new']);
:sqlstate

CREATE TABLE tr_text (id text PRIMARY KEY, status text);
INSERT INTO tr_text VALUES ('o1', 'running'), ('o2', NULL);
SELECT idem_transition('tr_text', 'o1', 'completed', ARRAY['running']);
SELECT idem_transition('tr_text', 'o1'::varchar, 'completed', ARRAY['running']);
-- text states are compared exactly: case and white space count
SELECT idem_transition('tr_text', 'o1', 'Completed', ARRAY['running']);
-- a NULL status is in no state: rejected
SELECT idem_transition('tr_text', 'o2', 'completed', ARRAY['running']);

-- 42804: a key type with no implicit cast to the key's type
SELECT idem_transition('tr_orders', 1::bigint, 'paid', ARRAY['pending']);
:sqlstate
SELECT idem_transition('tr_orders', 1.0, 'paid', ARRAY['pending']);
:sqlstate
SELECT idem_transition('tr_uuid', 1, 'done', ARRAY['new']);
:sqlstate

-------------------------------------------------------------------------------
-- States must be values of the column's type
-------------------------------------------------------------------------------
-- 22P02: a label the enum does not have, in to_state or from_states, even
-- when the answer would be already or not_found
SELECT idem_transition('tr_orders', 1, 'payed', ARRAY['pending']);
:sqlstate
SELECT idem_transition('tr_orders', 42, 'paid', ARRAY['pendng']);
:sqlstate
-- 22001: too long for the varchar(12) column
SELECT idem_transition('tr_uuid', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'done-and-dusted', ARRAY['new']);
:sqlstate

-------------------------------------------------------------------------------
-- The status column, and tables idem_transition cannot use
-------------------------------------------------------------------------------
CREATE TABLE tr_named (id integer PRIMARY KEY, state text, "Phase" text, n integer);
INSERT INTO tr_named VALUES (1, 'a', 'x', 0);
SELECT idem_transition('tr_named', 1, 'b', ARRAY['a'], status_column => 'state');
SELECT idem_transition('tr_named', 1, 'y', ARRAY['x'], 'Phase');
-- 42703: no such column (names are exact: no case folding), or a system column
SELECT idem_transition('tr_named', 1, 'b', ARRAY['a']);
:sqlstate
SELECT idem_transition('tr_named', 1, 'y', ARRAY['x'], 'phase');
:sqlstate
SELECT idem_transition('tr_named', 1, 'y', ARRAY['x'], 'ctid');
:sqlstate
-- 42804: the status column is not text or an enum
SELECT idem_transition('tr_named', 1, '1', ARRAY['0'], 'n');
:sqlstate
-- a primary key of several columns ((scope, id) of a table distributed by
-- scope): id is a row of the key's values, in the key's column order
CREATE TABLE tr_composite (a integer, b integer, status text, PRIMARY KEY (a, b));
INSERT INTO tr_composite VALUES (1, 1, 'y'), (1, 2, 'y'), (2, 1, 'z');
SELECT idem_transition('tr_composite', ROW(1, 2), 'x', ARRAY['y']);
SELECT idem_transition('tr_composite', ROW(1, 2), 'x', ARRAY['y']);
SELECT idem_transition('tr_composite', ROW(2, 1), 'x', ARRAY['y']);
SELECT idem_transition('tr_composite', ROW(2, 2), 'x', ARRAY['y']);
-- values of other types as for a single column: implicit casts, text
SELECT idem_transition('tr_composite', ROW(1::smallint, '1'), 'x', ARRAY['y']);
TABLE tr_composite ORDER BY a, b;
-- 42804: not a row, or a row of another length or with an unusable value
SELECT idem_transition('tr_composite', 1, 'x', ARRAY['y']);
:sqlstate
SELECT idem_transition('tr_composite', ROW(1, 2, 3), 'x', ARRAY['y']);
:sqlstate
SELECT idem_transition('tr_composite', ROW(1, 2.5), 'x', ARRAY['y']);
:sqlstate
-- 22004: a NULL in the row
SELECT idem_transition('tr_composite', ROW(1, NULL::integer), 'x', ARRAY['y']);
:sqlstate
CREATE TABLE tr_nopk (id integer UNIQUE, status text);
SELECT idem_transition('tr_nopk', 1, 'x', ARRAY['y']);
:sqlstate
-- 42809: not a table
CREATE VIEW tr_orders_view AS SELECT * FROM tr_orders;
SELECT idem_transition('tr_orders_view', 1, 'paid', ARRAY['pending']);
:sqlstate
CREATE SEQUENCE tr_seq;
SELECT idem_transition('tr_seq', 1, 'paid', ARRAY['pending']);
:sqlstate
-- 42P01: no such table (regclass input)
SELECT idem_transition('tr_missing', 1, 'paid', ARRAY['pending']);
:sqlstate

-- a partitioned table: the primary key is the partitioned table's
CREATE TABLE tr_parted (id bigint PRIMARY KEY, status text NOT NULL) PARTITION BY RANGE (id);
CREATE TABLE tr_parted_1 PARTITION OF tr_parted FOR VALUES FROM (0) TO (100);
CREATE TABLE tr_parted_2 PARTITION OF tr_parted FOR VALUES FROM (100) TO (200);
INSERT INTO tr_parted VALUES (5, 'a'), (150, 'a');
SELECT idem_transition('tr_parted', 150, 'b', ARRAY['a']),
       idem_transition('tr_parted', 150, 'b', ARRAY['a']);
SELECT tableoid::regclass, id, status FROM tr_parted ORDER BY id;

-------------------------------------------------------------------------------
-- 22004: NULL arguments (the function is not STRICT)
-------------------------------------------------------------------------------
SELECT idem_transition(NULL, 1, 'paid', ARRAY['pending']);
:sqlstate
SELECT idem_transition('tr_orders', NULL::integer, 'paid', ARRAY['pending']);
:sqlstate
SELECT idem_transition('tr_orders', NULL, 'paid', ARRAY['pending']);
:sqlstate
SELECT idem_transition('tr_orders', 1, NULL, ARRAY['pending']);
:sqlstate
SELECT idem_transition('tr_orders', 1, 'paid', NULL);
:sqlstate
SELECT idem_transition('tr_orders', 1, 'paid', ARRAY['pending', NULL]);
:sqlstate
SELECT idem_transition('tr_orders', 1, 'paid', ARRAY['pending'], NULL);
:sqlstate

-------------------------------------------------------------------------------
-- Injection attempts: identifiers are quoted from the catalog, values are
-- parameters.  Every attempt fails or is taken literally; nothing is dropped.
-------------------------------------------------------------------------------
CREATE TABLE "tr ""odd"" table" ("the key" text PRIMARY KEY, "st""atus" text);
INSERT INTO "tr ""odd"" table" VALUES ('k', 'a');
-- odd names work, because they are quoted
SELECT idem_transition('"tr ""odd"" table"', 'k', 'b', ARRAY['a'], 'st"atus');
-- through rel: not a valid name, or no such table
SELECT idem_transition('tr_orders; DROP TABLE tr_orders', 1, 'paid', ARRAY['pending']);
:sqlstate
SELECT idem_transition('tr_orders WHERE true', 1, 'paid', ARRAY['pending']);
:sqlstate
-- through status_column: there is no column of that name
SELECT idem_transition('tr_orders', 1, 'paid', ARRAY['pending'], 'status = ''paid'' --');
:sqlstate
SELECT idem_transition('tr_orders', 1, 'paid', ARRAY['pending'], 'status" = NULL; DROP TABLE tr_orders; --');
:sqlstate
-- through id: a key that does not exist
SELECT idem_transition('tr_text', $$o1' OR true --$$, 'x', ARRAY['completed']);
-- through the states: stored literally (text column) or refused (enum)
SELECT idem_transition('tr_text', 'o1', $$x'; DROP TABLE tr_text; --$$, ARRAY['completed']);
SELECT id, status FROM tr_text ORDER BY id;
SELECT idem_transition('tr_orders', 1, $$paid'; DROP TABLE tr_orders; --$$, ARRAY['pending']);
:sqlstate
SELECT count(*) AS tr_orders_rows FROM tr_orders;

-------------------------------------------------------------------------------
-- search_path: operators named = in a schema searched first change nothing
-------------------------------------------------------------------------------
CREATE SCHEMA tr_evil;
\i sql/include/planted_operator.sql
SELECT pg_temp.plant_operator('tr_evil', '=', typ) AS planted FROM unnest(ARRAY['integer', 'text']) AS typ;
SET search_path = tr_evil, pg_catalog, public;
SELECT count(*) FROM tr_orders WHERE id = 1;
:sqlstate
SELECT idem_transition('tr_orders', 3, 'pending', ARRAY['cancelled']);
SELECT idem_transition('tr_text', 'o1', 'y', ARRAY['completed']);
RESET search_path;

-------------------------------------------------------------------------------
-- Privileges and row level security: the caller's own
-------------------------------------------------------------------------------
CREATE ROLE regress_tr_reader;
CREATE ROLE regress_tr_writer;
GRANT SELECT ON tr_orders TO regress_tr_reader;
GRANT SELECT, UPDATE ON tr_orders TO regress_tr_writer;
\i sql/include/try.sql
SET ROLE regress_tr_reader;
-- 42501 whatever the answer would have been (already, applied, not_found)
SELECT c AS call, pg_temp.try(c, keep => true) AS reader FROM (VALUES
    ($$SELECT idem_transition('tr_orders', 1, 'shipped', ARRAY['paid'])$$), ($$SELECT idem_transition('tr_orders', 1, 'paid', ARRAY['pending'])$$),
    ($$SELECT idem_transition('tr_orders', 42, 'paid', ARRAY['pending'])$$)) AS v(c);
RESET ROLE;
-- UPDATE on the status column alone is enough
CREATE ROLE regress_tr_column;
GRANT SELECT, UPDATE (status) ON tr_orders TO regress_tr_column;
SET ROLE regress_tr_column;
SELECT idem_transition('tr_orders', 3, 'cancelled', ARRAY['pending']);
RESET ROLE;
-- UPDATE without SELECT: the lock reads the row, so 42501 too
CREATE ROLE regress_tr_blind;
GRANT UPDATE ON tr_orders TO regress_tr_blind;
SET ROLE regress_tr_blind;
SELECT idem_transition('tr_orders', 1, 'shipped', ARRAY['paid']);
:sqlstate
RESET ROLE;
-- row level security: a row the policy hides is not_found
ALTER TABLE tr_orders ADD COLUMN owner name NOT NULL DEFAULT 'regress_tr_writer';
UPDATE tr_orders SET owner = 'someone_else' WHERE id = 2;
ALTER TABLE tr_orders ENABLE ROW LEVEL SECURITY;
CREATE POLICY tr_own ON tr_orders USING (owner = current_user);
SET ROLE regress_tr_writer;
SELECT idem_transition('tr_orders', 2, 'cancelled', ARRAY['shipped']);
SELECT idem_transition('tr_orders', 1, 'shipped', ARRAY['paid']);
RESET ROLE;
SELECT id, status, owner FROM tr_orders ORDER BY id;

-------------------------------------------------------------------------------
-- Triggers on the table see the move as an ordinary UPDATE
-------------------------------------------------------------------------------
-- a transition guard refuses a move its edges do not allow (IK005), even
-- when the caller listed the state in from_states
CREATE TRIGGER tr_orders_guard BEFORE UPDATE ON tr_orders FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'pending>paid', 'paid>shipped', 'pending>cancelled');
SELECT idem_transition('tr_orders', 3, 'paid', ARRAY['cancelled']);
:sqlstate
DROP TRIGGER tr_orders_guard ON tr_orders;
-- a BEFORE UPDATE trigger that skips the update: nothing was written, rejected
CREATE FUNCTION tr_skip() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
CREATE TRIGGER tr_skip BEFORE UPDATE ON tr_big FOR EACH ROW EXECUTE FUNCTION tr_skip();
SELECT idem_transition('tr_big', 7, 'archived', ARRAY['done']);
SELECT id, status FROM tr_big ORDER BY id;

-------------------------------------------------------------------------------
-- Clean up
-------------------------------------------------------------------------------
DROP TABLE tr_orders, tr_big, tr_uuid, tr_text, tr_named, tr_composite, tr_nopk,
           tr_parted, "tr ""odd"" table" CASCADE;
DROP SEQUENCE tr_seq;
DROP TYPE tr_order_status;
DROP FUNCTION tr_skip();
DROP SCHEMA tr_evil CASCADE;
DROP ROLE regress_tr_reader, regress_tr_writer, regress_tr_column, regress_tr_blind;

-- keys of fixed-length types are compared at full length: no char(1) or
-- bit(1) cast that would match another row
CREATE TABLE tix (code char(5) PRIMARY KEY, status text);
INSERT INTO tix VALUES ('A', 'open'), ('ABCDE', 'open');
SELECT idem_transition('tix', 'ABCDE', 'closed', ARRAY['open']);
SELECT idem_transition('tix', 'ABCDEFG', 'closed', ARRAY['open']);
SELECT code, status FROM tix ORDER BY code;
CREATE TABLE bits (b bit(4) PRIMARY KEY, status text);
INSERT INTO bits VALUES (B'1010', 'open'), (B'1000', 'open');
SELECT idem_transition('bits', B'1010', 'closed', ARRAY['open']);
SELECT b, status FROM bits ORDER BY b;
DROP TABLE tix, bits;

-- inheritance: the named table's row only, not a child's with the same key
CREATE TABLE par (id int PRIMARY KEY, status text);
CREATE TABLE chi (PRIMARY KEY (id)) INHERITS (par);
INSERT INTO par VALUES (1, 'open');
INSERT INTO chi VALUES (1, 'open');
SELECT idem_transition('par', 1, 'closed', ARRAY['open']);
SELECT tableoid::regclass, id, status FROM par ORDER BY 1;
DROP TABLE par CASCADE;
