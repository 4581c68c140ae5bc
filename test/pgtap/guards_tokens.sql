-- guards_tokens.sql — state machines, optimistic versions and single-use
-- tokens as the README states them: every outcome of idem_transition,
-- what idem_transition_guard (IK005) and idem_version_guard (IK006) let
-- through and refuse, and the life of a token.  Their signatures are in
-- sql/surface.sql, their bad arguments in sql/bad_input.sql and
-- sql/transition.sql.
BEGIN;
SELECT plan(28);

-------------------------------------------------------------------------------
-- idem_transition: the four outcomes
-------------------------------------------------------------------------------
CREATE TYPE tap_state AS ENUM ('pending', 'paid', 'shipped', 'cancelled');
CREATE TABLE tap_orders (id bigint PRIMARY KEY, status tap_state NOT NULL);
INSERT INTO tap_orders VALUES (1, 'pending'), (2, 'cancelled');

SELECT is(idem_transition('tap_orders', 1, 'paid', ARRAY['pending']), 'applied',
    'applied: moved from an allowed state');
SELECT is(idem_transition('tap_orders', 1, 'paid', ARRAY['pending']), 'already',
    'already: the row is in to_state (idempotent success)');
SELECT is(idem_transition('tap_orders', 2, 'paid', ARRAY['pending']), 'rejected',
    'rejected: the row is in a state outside from_states');
SELECT is(idem_transition('tap_orders', 3, 'paid', ARRAY['pending']), 'not_found',
    'not_found: no row has that key');
SELECT results_eq($$SELECT id, status::text FROM tap_orders ORDER BY id$$,
    $$VALUES (1::bigint, 'paid'), (2, 'cancelled')$$,
    'only the applied transition wrote');

CREATE TABLE tap_jobs (id uuid PRIMARY KEY, status text);
INSERT INTO tap_jobs VALUES ('00000000-0000-0000-0000-000000000001', 'parked');
SELECT is(idem_transition('tap_jobs', '00000000-0000-0000-0000-000000000001'::uuid, 'processing', ARRAY['parked']),
    'applied', 'a uuid key and a text status column');
SELECT is(idem_transition('tap_jobs', '00000000-0000-0000-0000-000000000001', 'processing', ARRAY['parked']),
    'already', 'a uuid key given as a string literal');

-- a primary key of two columns takes ROW(a, b)
CREATE TABLE tap_pair (a int, b int, status text, PRIMARY KEY (a, b));
INSERT INTO tap_pair VALUES (1, 2, 'y');
SELECT is(idem_transition('tap_pair', ROW(1, 2), 'x', ARRAY['y']), 'applied',
    'a primary key of two columns takes ROW(a, b)');
CREATE VIEW tap_orders_v AS SELECT * FROM tap_orders;

-------------------------------------------------------------------------------
-- idem_transition_guard: IK005
-------------------------------------------------------------------------------
CREATE TRIGGER tap_orders_guard AFTER INSERT OR UPDATE ON tap_orders FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', '>pending', 'pending>paid',
                                           'paid>shipped', 'pending>cancelled');
SELECT lives_ok($$UPDATE tap_orders SET status = 'shipped' WHERE id = 1$$,
    'an allowed transition goes through');
SELECT lives_ok($$UPDATE tap_orders SET status = 'shipped' WHERE id = 1$$,
    'an update that keeps the state goes through');
SELECT throws_ok($$UPDATE tap_orders SET status = 'pending' WHERE id = 1$$,
    'IK005', NULL,
    'a transition not listed raises IK005');
SELECT throws_ok($$UPDATE tap_orders SET status = 'paid'$$,
    'IK005', NULL,
    'a multi-row UPDATE with one refused row raises IK005');
SELECT throws_ok($$UPDATE tap_orders_v SET status = 'paid' WHERE id = 2$$,
    'IK005', NULL,
    'an UPDATE through a view raises IK005');
SELECT throws_ok($$SELECT idem_transition('tap_orders', 2, 'paid', ARRAY['cancelled'])$$,
    'IK005', NULL,
    'idem_transition cannot move past the guard either');
SELECT throws_ok($$INSERT INTO tap_orders VALUES (5, 'paid')$$,
    'IK005', NULL,
    'an INSERT in a state not listed as ''>state'' raises IK005');
SELECT lives_ok($$INSERT INTO tap_orders VALUES (5, 'pending')$$,
    'an INSERT in a listed initial state goes through');
SELECT results_eq($$SELECT id, status::text FROM tap_orders ORDER BY id$$,
    $$VALUES (1::bigint, 'shipped'), (2, 'cancelled'), (5, 'pending')$$,
    'the refused changes changed nothing');

-------------------------------------------------------------------------------
-- idem_version_guard: IK006
-------------------------------------------------------------------------------
CREATE TABLE tap_accounts (id int PRIMARY KEY, balance int NOT NULL, version int NOT NULL DEFAULT 1);
CREATE TRIGGER tap_accounts_version BEFORE UPDATE ON tap_accounts FOR EACH ROW
    EXECUTE FUNCTION idem_version_guard('version');
INSERT INTO tap_accounts VALUES (1, 100);
SELECT results_eq($$UPDATE tap_accounts SET balance = 90, version = 1 WHERE id = 1 RETURNING version$$,
    $$VALUES (2)$$,
    'an update with the stored version goes through and increments it');
SELECT throws_ok($$UPDATE tap_accounts SET balance = 80, version = 1 WHERE id = 1$$,
    'IK006', NULL,
    'an update with an older version raises IK006');
SELECT results_eq($$SELECT balance, version FROM tap_accounts$$,
    $$VALUES (90, 2)$$,
    'the stale update changed nothing');
SELECT results_eq($$UPDATE tap_accounts SET balance = balance + 1 RETURNING version$$,
    $$VALUES (3)$$,
    'an update that does not set the version goes through and increments it');

-------------------------------------------------------------------------------
-- Tokens
-------------------------------------------------------------------------------
SELECT idem_token_issue('tap-form') AS tap_token \gset
SELECT matches(:'tap_token'::text, '^[A-Za-z0-9_-]{22}$',
    'a token is 22 URL-safe characters (base64url, no padding)');
SELECT is(idem_token_consume(:'tap_token', 'other'), false,
    'consuming in another scope is false');
SELECT is(idem_token_consume(:'tap_token', 'tap-form'), true,
    'the first consume is true');
SELECT is(idem_token_consume(:'tap_token', 'tap-form'), false,
    'the second consume is false');
SELECT is(idem_token_consume('never-issued', 'tap-form'), false,
    'an unknown token is false');
SELECT idem_token_issue('tap-form') AS tap_expired \gset
UPDATE idempotency_token SET expires_at = clock_timestamp() - interval '1 second' WHERE token = :'tap_expired';
SELECT is(idem_token_consume(:'tap_expired', 'tap-form'), false,
    'an expired token is false');
SELECT results_eq(
    format($$SELECT expires_at - created_at FROM idempotency_token WHERE token = %L$$,
           idem_token_issue('tap-ttl', '90 seconds')),
    $$VALUES (interval '90 seconds')$$,
    'ttl sets expires_at from the issue time');

SELECT * FROM finish();
ROLLBACK;
