-- guards_tokens.sql — state machines, optimistic versions and single-use
-- tokens as the README states them: the surface of idem_transition,
-- idem_transition_guard, idem_version_guard, idem_token_issue,
-- idem_token_consume and idempotency_token; every outcome; IK005, IK006
-- and the other SQLSTATEs.
BEGIN;
SELECT plan(79);

-------------------------------------------------------------------------------
-- Surface: signatures, return types, not STRICT, not SECURITY DEFINER
-------------------------------------------------------------------------------
SELECT has_function('idem_transition', ARRAY['regclass', 'anycompatible', 'text', 'text[]', 'name'],
    'function idem_transition(regclass, anycompatible, text, text[], name) exists');
SELECT function_returns('idem_transition', ARRAY['regclass', 'anycompatible', 'text', 'text[]', 'name'], 'text',
    'idem_transition returns text');
SELECT is(pg_get_function_arguments('idem_transition(regclass, anycompatible, text, text[], name)'::regprocedure),
    'rel regclass, id anycompatible, to_state text, from_states text[], status_column name DEFAULT ''status''::name',
    'idem_transition takes (rel, id, to_state, from_states, status_column => ''status'')');
SELECT has_function('idem_transition_guard', ARRAY[]::text[],
    'function idem_transition_guard() exists');
SELECT function_returns('idem_transition_guard', ARRAY[]::text[], 'trigger',
    'idem_transition_guard returns trigger');
SELECT has_function('idem_version_guard', ARRAY[]::text[],
    'function idem_version_guard() exists');
SELECT function_returns('idem_version_guard', ARRAY[]::text[], 'trigger',
    'idem_version_guard returns trigger');
SELECT has_function('idem_token_issue', ARRAY['text', 'interval'],
    'function idem_token_issue(text, interval) exists');
SELECT function_returns('idem_token_issue', ARRAY['text', 'interval'], 'text',
    'idem_token_issue returns text');
SELECT is(pg_get_function_arguments('idem_token_issue(text, interval)'::regprocedure),
    'scope text DEFAULT ''''::text, ttl interval DEFAULT ''00:10:00''::interval',
    'idem_token_issue takes (scope => '''', ttl => ''10 minutes'')');
SELECT has_function('idem_token_consume', ARRAY['text', 'text'],
    'function idem_token_consume(text, text) exists');
SELECT function_returns('idem_token_consume', ARRAY['text', 'text'], 'boolean',
    'idem_token_consume returns boolean');
SELECT is(pg_get_function_arguments('idem_token_consume(text, text)'::regprocedure),
    'token text, scope text DEFAULT ''''::text',
    'idem_token_consume takes (token, scope => '''')');

SELECT isnt_strict('idem_transition', ARRAY['regclass', 'anycompatible', 'text', 'text[]', 'name'],
    'idem_transition is not STRICT');
SELECT isnt_strict('idem_token_issue', ARRAY['text', 'interval'],
    'idem_token_issue is not STRICT');
SELECT isnt_strict('idem_token_consume', ARRAY['text', 'text'],
    'idem_token_consume is not STRICT');
SELECT volatility_is('idem_transition', ARRAY['regclass', 'anycompatible', 'text', 'text[]', 'name'], 'volatile',
    'idem_transition is VOLATILE');
SELECT volatility_is('idem_token_issue', ARRAY['text', 'interval'], 'volatile',
    'idem_token_issue is VOLATILE');
SELECT volatility_is('idem_token_consume', ARRAY['text', 'text'], 'volatile',
    'idem_token_consume is VOLATILE');
SELECT is_empty(
    $$SELECT p.proname::text FROM pg_catalog.pg_proc p
       WHERE p.proname IN ('idem_transition', 'idem_transition_guard', 'idem_version_guard',
                           'idem_token_issue', 'idem_token_consume')
         AND p.prosecdef$$,
    'none of them is SECURITY DEFINER: they run with the caller''s privileges');

-------------------------------------------------------------------------------
-- idempotency_token: columns, keys, purge index, pg_dump, comments
-------------------------------------------------------------------------------
SELECT has_table('idempotency_token', 'table idempotency_token exists');
SELECT columns_are('idempotency_token',
    ARRAY['scope', 'token', 'created_at', 'expires_at', 'consumed_at'],
    'idempotency_token has exactly the documented columns');
SELECT col_type_is('idempotency_token', 'expires_at', 'timestamp with time zone',
    'idempotency_token.expires_at is timestamptz');
SELECT col_not_null('idempotency_token', 'expires_at',
    'idempotency_token.expires_at is NOT NULL');
SELECT col_default_is('idempotency_token', 'scope', ''::text,
    'idempotency_token.scope defaults to the empty string');
SELECT col_is_null('idempotency_token', 'consumed_at',
    'idempotency_token.consumed_at is nullable (NULL while unused)');
SELECT col_is_pk('idempotency_token', ARRAY['scope', 'token'],
    'the primary key of idempotency_token is (scope, token)');
SELECT has_index('idempotency_token', 'idempotency_token_expires_at_idx', ARRAY['expires_at'],
    'idempotency_token has an index on expires_at for purge');
SELECT ok(
    (SELECT 'idempotency_token'::regclass = ANY (extconfig)
       FROM pg_catalog.pg_extension WHERE extname = 'idempotency'),
    'idempotency_token is registered with pg_extension_config_dump');
SELECT is(
    (SELECT extcondition[array_position(extconfig, 'idempotency_token'::regclass)]
       FROM pg_catalog.pg_extension WHERE extname = 'idempotency'),
    '',
    'pg_dump keeps every row of idempotency_token');
SELECT isnt(obj_description('idempotency_token'::regclass, 'pg_class'), NULL,
    'table idempotency_token has a COMMENT');
SELECT is_empty(
    $$SELECT a.attname::text FROM pg_catalog.pg_attribute a
       WHERE a.attrelid = 'idempotency_token'::regclass AND a.attnum > 0 AND NOT a.attisdropped
         AND pg_catalog.col_description(a.attrelid, a.attnum) IS NULL$$,
    'every column of idempotency_token has a COMMENT');
SELECT is_empty(
    $$SELECT p.proname::text FROM pg_catalog.pg_proc p
       WHERE p.proname IN ('idem_transition', 'idem_transition_guard', 'idem_version_guard',
                           'idem_token_issue', 'idem_token_consume')
         AND pg_catalog.obj_description(p.oid, 'pg_proc') IS NULL$$,
    'every new function has a COMMENT');
SELECT set_has(
    $$SELECT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)
        FROM pg_catalog.pg_depend d
       WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass
         AND d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'idempotency')
         AND d.deptype = 'e'$$,
    $$VALUES ('table idempotency_token'),
             ('function idem_transition(regclass,anycompatible,text,text[],name)'),
             ('function idem_transition_guard()'),
             ('function idem_version_guard()'),
             ('function idem_token_issue(text,interval)'),
             ('function idem_token_consume(text,text)')$$,
    'the table and functions belong to extension idempotency');

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

-------------------------------------------------------------------------------
-- idem_transition: errors
-------------------------------------------------------------------------------
SELECT throws_ok($$SELECT idem_transition('tap_orders', 1, NULL, ARRAY['pending'])$$,
    '22004', 'argument "to_state" of idem_transition must not be null',
    'NULL to_state raises 22004');
SELECT throws_ok($$SELECT idem_transition('tap_orders', 1, 'paid', ARRAY[NULL])$$,
    '22004', 'from_states of idem_transition must not contain null',
    'a NULL in from_states raises 22004');
SELECT throws_ok($$SELECT idem_transition('tap_orders', 1, 'paid', ARRAY['pending'], 'state')$$,
    '42703', 'column "state" of relation "public.tap_orders" does not exist',
    'a missing status column raises 42703');
SELECT throws_ok($$SELECT idem_transition('tap_orders', 1, 'payed', ARRAY['pending'])$$,
    '22P02', NULL,
    'a state that is not a label of the enum raises 22P02');
SELECT throws_ok($$SELECT idem_transition('tap_orders', 1.5, 'paid', ARRAY['pending'])$$,
    '42804', 'id of type numeric does not match the primary key of "public.tap_orders"',
    'an id of a type without an implicit cast raises 42804');
CREATE TABLE tap_pair (a int, b int, status text, PRIMARY KEY (a, b));
SELECT throws_ok($$SELECT idem_transition('tap_pair', 1, 'x', ARRAY['y'])$$,
    '42804', 'id of type integer does not match the primary key of "public.tap_pair"',
    'a single value for a primary key of two columns raises 42804');
INSERT INTO tap_pair VALUES (1, 2, 'y');
SELECT is(idem_transition('tap_pair', ROW(1, 2), 'x', ARRAY['y']), 'applied',
    'a primary key of two columns takes ROW(a, b)');
CREATE VIEW tap_orders_v AS SELECT * FROM tap_orders;
SELECT throws_ok($$SELECT idem_transition('tap_orders_v', 1, 'paid', ARRAY['pending'])$$,
    '42809', '"public.tap_orders_v" is not a table',
    'a view raises 42809');
CREATE ROLE regress_tap_reader;
GRANT SELECT ON tap_orders TO regress_tap_reader;
SET LOCAL ROLE regress_tap_reader;
SELECT throws_ok($$SELECT idem_transition('tap_orders', 1, 'shipped', ARRAY['paid'])$$,
    '42501', 'permission denied for table tap_orders',
    'a role without UPDATE privilege cannot transition (42501)');
RESET ROLE;

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
    'IK005', 'transition of column "status" from "shipped" to "pending" is not allowed',
    'a transition not listed raises IK005');
SELECT throws_ok($$UPDATE tap_orders SET status = 'paid'$$,
    'IK005', NULL,
    'a multi-row UPDATE with one refused row raises IK005');
SELECT throws_ok($$UPDATE tap_orders_v SET status = 'paid' WHERE id = 2$$,
    'IK005', 'transition of column "status" from "cancelled" to "paid" is not allowed',
    'an UPDATE through a view raises IK005');
SELECT throws_ok($$SELECT idem_transition('tap_orders', 2, 'paid', ARRAY['cancelled'])$$,
    'IK005', NULL,
    'idem_transition cannot move past the guard either');
SELECT throws_ok($$INSERT INTO tap_orders VALUES (5, 'paid')$$,
    'IK005', 'initial state "paid" of column "status" is not allowed',
    'an INSERT in a state not listed as ''>state'' raises IK005');
SELECT lives_ok($$INSERT INTO tap_orders VALUES (5, 'pending')$$,
    'an INSERT in a listed initial state goes through');
SELECT results_eq($$SELECT id, status::text FROM tap_orders ORDER BY id$$,
    $$VALUES (1::bigint, 'shipped'), (2, 'cancelled'), (5, 'pending')$$,
    'the refused changes changed nothing');

CREATE TABLE tap_badguard (id int PRIMARY KEY, status text);
INSERT INTO tap_badguard VALUES (1, 'a');
CREATE TRIGGER tap_badguard BEFORE UPDATE ON tap_badguard FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'a-b');
SELECT throws_ok($$UPDATE tap_badguard SET status = 'b'$$,
    '22023', 'invalid argument "a-b" of trigger "tap_badguard" on table "tap_badguard"',
    'a bad trigger argument is reported (22023) when the trigger fires');

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
    'IK006', 'stale version: the row was changed since it was read',
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
SELECT throws_ok($$SELECT idem_token_issue(NULL)$$,
    '22004', 'argument "scope" of idem_token_issue must not be null',
    'NULL scope raises 22004');
SELECT throws_ok($$SELECT idem_token_issue('f', NULL)$$,
    '22004', 'argument "ttl" of idem_token_issue must not be null',
    'NULL ttl raises 22004');
SELECT throws_ok($$SELECT idem_token_consume(NULL)$$,
    '22004', 'argument "token" of idem_token_consume must not be null',
    'NULL token raises 22004');
SELECT throws_ok($$SELECT idem_token_consume('t', NULL)$$,
    '22004', 'argument "scope" of idem_token_consume must not be null',
    'NULL scope raises 22004 in consume');
SELECT throws_ok($$SELECT idem_token_issue('f', '-5 minutes')$$,
    '22023', 'ttl must be a positive interval',
    'a negative ttl raises 22023');
SELECT throws_ok($$SELECT idem_token_issue(repeat('s', 256))$$,
    '22023', 'idempotency scope is too long',
    'an over-long scope raises 22023');
CREATE ROLE regress_tap_tokenless;
SET LOCAL ROLE regress_tap_tokenless;
SELECT throws_ok($$SELECT idem_token_issue('f')$$,
    '42501', 'permission denied for idempotency scope "f"',
    'a role without privileges on idempotency_token and without a scope grant cannot issue (42501)');
SELECT throws_ok($$SELECT idem_token_consume('t')$$,
    '42501', 'permission denied for idempotency scope ""',
    'a role without privileges on idempotency_token and without a scope grant cannot consume (42501)');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
