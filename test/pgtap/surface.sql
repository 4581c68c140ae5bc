-- surface.sql — the public surface of idempotency 1.1, as the README states
-- it: the idem_status enum, the idempotent_record table, the functions with
-- their signatures, strictness, volatility and security, pg_dump
-- registration and the comments on every object.
BEGIN;
SELECT plan(77);

-------------------------------------------------------------------------------
-- idem_status
-------------------------------------------------------------------------------
SELECT has_enum('idem_status', 'enum idem_status exists');
SELECT enum_has_labels('idem_status',
    ARRAY['in_progress', 'succeeded', 'failed', 'unknown'],
    'idem_status has the labels in_progress, succeeded, failed, unknown, in that order');

-------------------------------------------------------------------------------
-- idempotent_record
-------------------------------------------------------------------------------
SELECT has_table('idempotent_record', 'table idempotent_record exists');
SELECT columns_are('idempotent_record',
    ARRAY['scope', 'key', 'status', 'fingerprint', 'result', 'recovery_point',
          'fence', 'locked_until', 'created_at', 'updated_at', 'expires_at'],
    'idempotent_record has exactly the documented columns');

SELECT col_type_is('idempotent_record', 'scope', 'text', 'idempotent_record.scope is text');
SELECT col_not_null('idempotent_record', 'scope', 'idempotent_record.scope is NOT NULL');
SELECT col_default_is('idempotent_record', 'scope', ''::text, 'idempotent_record.scope defaults to the empty string');

SELECT col_type_is('idempotent_record', 'key', 'text', 'idempotent_record.key is text');
SELECT col_not_null('idempotent_record', 'key', 'idempotent_record.key is NOT NULL');

SELECT col_type_is('idempotent_record', 'status', 'idem_status', 'idempotent_record.status is idem_status');
SELECT col_not_null('idempotent_record', 'status', 'idempotent_record.status is NOT NULL (every record has a status)');

SELECT col_type_is('idempotent_record', 'fingerprint', 'bytea', 'idempotent_record.fingerprint is bytea');
SELECT col_is_null('idempotent_record', 'fingerprint', 'idempotent_record.fingerprint is nullable (claims without a fingerprint)');

SELECT col_type_is('idempotent_record', 'result', 'jsonb', 'idempotent_record.result is jsonb');
SELECT col_is_null('idempotent_record', 'result', 'idempotent_record.result is nullable (no outcome yet)');

SELECT col_type_is('idempotent_record', 'recovery_point', 'text', 'idempotent_record.recovery_point is text');
SELECT col_is_null('idempotent_record', 'recovery_point', 'idempotent_record.recovery_point is nullable (none saved)');

SELECT col_type_is('idempotent_record', 'fence', 'bigint', 'idempotent_record.fence is bigint');
SELECT col_not_null('idempotent_record', 'fence', 'idempotent_record.fence is NOT NULL');

SELECT col_type_is('idempotent_record', 'locked_until', 'timestamp with time zone', 'idempotent_record.locked_until is timestamptz');
SELECT col_is_null('idempotent_record', 'locked_until', 'idempotent_record.locked_until is nullable (NULL for in-transaction claims)');

SELECT col_type_is('idempotent_record', 'created_at', 'timestamp with time zone', 'idempotent_record.created_at is timestamptz');
SELECT col_not_null('idempotent_record', 'created_at', 'idempotent_record.created_at is NOT NULL');
SELECT col_type_is('idempotent_record', 'updated_at', 'timestamp with time zone', 'idempotent_record.updated_at is timestamptz');
SELECT col_not_null('idempotent_record', 'updated_at', 'idempotent_record.updated_at is NOT NULL');
SELECT col_type_is('idempotent_record', 'expires_at', 'timestamp with time zone', 'idempotent_record.expires_at is timestamptz');
SELECT col_not_null('idempotent_record', 'expires_at', 'idempotent_record.expires_at is NOT NULL');

SELECT has_pk('idempotent_record', 'idempotent_record has a primary key');
SELECT col_is_pk('idempotent_record', ARRAY['scope', 'key'], 'the primary key of idempotent_record is (scope, key)');

-------------------------------------------------------------------------------
-- Functions: existence, signature, return type
-------------------------------------------------------------------------------
SELECT has_function('idem_claim', ARRAY['text', 'text', 'bytea', 'interval', 'boolean', 'interval', 'interval'],
    'function idem_claim(text, text, bytea, interval, boolean, interval, interval) exists');
SELECT function_returns('idem_claim', ARRAY['text', 'text', 'bytea', 'interval', 'boolean', 'interval', 'interval'], 'idem_claim_result',
    'idem_claim returns an idem_claim_result');
SELECT is(pg_get_function_arguments('idem_claim(text, text, bytea, interval, boolean, interval, interval)'::regprocedure),
    'key text, scope text DEFAULT ''''::text, fingerprint bytea DEFAULT NULL::bytea, '
    'ttl interval DEFAULT NULL::interval, wait boolean DEFAULT true, lease interval DEFAULT NULL::interval, '
    'wait_for_outcome interval DEFAULT NULL::interval',
    'idem_claim takes (key, scope => '''', fingerprint => NULL, ttl => NULL, wait => true, lease => NULL, wait_for_outcome => NULL)');
SELECT is(
    (SELECT pg_catalog.string_agg(a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
       FROM pg_catalog.pg_attribute a
      WHERE a.attrelid = 'idem_claim_result'::regclass AND a.attnum > 0 AND NOT a.attisdropped),
    'outcome text, status idem_status, result jsonb, fence bigint, recovery_point text, retry_after interval',
    'idem_claim_result is (outcome, status, result, fence, recovery_point, retry_after)');

SELECT has_function('idem_finish', ARRAY['text', 'jsonb', 'text', 'bigint'],
    'function idem_finish(text, jsonb, text, bigint) exists');
SELECT function_returns('idem_finish', ARRAY['text', 'jsonb', 'text', 'bigint'], 'void',
    'idem_finish returns void');
SELECT is(pg_get_function_arguments('idem_finish(text, jsonb, text, bigint)'::regprocedure),
    'key text, result jsonb, scope text DEFAULT ''''::text, fence bigint DEFAULT NULL::bigint',
    'idem_finish takes (key, result, scope => '''', fence => NULL)');

SELECT has_function('idem_fail', ARRAY['text', 'jsonb', 'boolean', 'text', 'bigint'],
    'function idem_fail(text, jsonb, boolean, text, bigint) exists');
SELECT function_returns('idem_fail', ARRAY['text', 'jsonb', 'boolean', 'text', 'bigint'], 'void',
    'idem_fail returns void');
SELECT is(pg_get_function_arguments('idem_fail(text, jsonb, boolean, text, bigint)'::regprocedure),
    'key text, error jsonb, retryable boolean DEFAULT true, scope text DEFAULT ''''::text, fence bigint DEFAULT NULL::bigint',
    'idem_fail takes (key, error, retryable => true, scope => '''', fence => NULL)');

SELECT has_function('idem_lookup', ARRAY['text', 'text'],
    'function idem_lookup(text, text) exists');
SELECT function_returns('idem_lookup', ARRAY['text', 'text'], 'setof idempotent_record',
    'idem_lookup returns setof idempotent_record');
SELECT is(pg_get_function_arguments('idem_lookup(text, text)'::regprocedure),
    'key text, scope text DEFAULT ''''::text',
    'idem_lookup takes (key, scope => '''')');

SELECT has_function('idem_fingerprint', ARRAY['jsonb'],
    'function idem_fingerprint(jsonb) exists');
SELECT function_returns('idem_fingerprint', ARRAY['jsonb'], 'bytea',
    'idem_fingerprint returns bytea');
SELECT is(pg_get_function_arguments('idem_fingerprint(jsonb)'::regprocedure),
    'body jsonb',
    'idem_fingerprint takes (body)');

-------------------------------------------------------------------------------
-- Not STRICT: a NULL argument raises 22004, never silently returns NULL
-------------------------------------------------------------------------------
SELECT isnt_strict('idem_claim', ARRAY['text', 'text', 'bytea', 'interval', 'boolean', 'interval', 'interval'],
    'idem_claim is not STRICT');
SELECT isnt_strict('idem_finish', ARRAY['text', 'jsonb', 'text', 'bigint'],
    'idem_finish is not STRICT');
SELECT isnt_strict('idem_fail', ARRAY['text', 'jsonb', 'boolean', 'text', 'bigint'],
    'idem_fail is not STRICT');
SELECT isnt_strict('idem_lookup', ARRAY['text', 'text'],
    'idem_lookup is not STRICT');
SELECT isnt_strict('idem_fingerprint', ARRAY['jsonb'],
    'idem_fingerprint is not STRICT');

-------------------------------------------------------------------------------
-- Volatility
-------------------------------------------------------------------------------
SELECT volatility_is('idem_claim', ARRAY['text', 'text', 'bytea', 'interval', 'boolean', 'interval', 'interval'], 'volatile',
    'idem_claim is VOLATILE');
SELECT volatility_is('idem_finish', ARRAY['text', 'jsonb', 'text', 'bigint'], 'volatile',
    'idem_finish is VOLATILE');
SELECT volatility_is('idem_fail', ARRAY['text', 'jsonb', 'boolean', 'text', 'bigint'], 'volatile',
    'idem_fail is VOLATILE');
SELECT volatility_is('idem_lookup', ARRAY['text', 'text'], 'volatile',
    'idem_lookup is VOLATILE (it reads the clock)');
SELECT volatility_is('idem_fingerprint', ARRAY['jsonb'], 'immutable',
    'idem_fingerprint is IMMUTABLE');

-------------------------------------------------------------------------------
-- No SECURITY DEFINER: the functions run with the caller's privileges and RLS
-------------------------------------------------------------------------------
SELECT isnt_definer('idem_claim', ARRAY['text', 'text', 'bytea', 'interval', 'boolean', 'interval', 'interval'],
    'idem_claim is not SECURITY DEFINER');
SELECT isnt_definer('idem_finish', ARRAY['text', 'jsonb', 'text', 'bigint'],
    'idem_finish is not SECURITY DEFINER');
SELECT isnt_definer('idem_fail', ARRAY['text', 'jsonb', 'boolean', 'text', 'bigint'],
    'idem_fail is not SECURITY DEFINER');
SELECT isnt_definer('idem_lookup', ARRAY['text', 'text'],
    'idem_lookup is not SECURITY DEFINER');
SELECT isnt_definer('idem_fingerprint', ARRAY['jsonb'],
    'idem_fingerprint is not SECURITY DEFINER');
SELECT is_empty(
    $$SELECT p.oid::regprocedure::text
        FROM pg_catalog.pg_depend d
        JOIN pg_catalog.pg_proc p ON p.oid = d.objid
       WHERE d.classid = 'pg_catalog.pg_proc'::regclass
         AND d.refclassid = 'pg_catalog.pg_extension'::regclass
         AND d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'idempotency')
         AND d.deptype = 'e'
         AND p.prosecdef$$,
    'no function of the extension is SECURITY DEFINER');

-------------------------------------------------------------------------------
-- Settings (README "Settings"); custom settings are listed once the library
-- is loaded, which the first call of one of its functions does.
-------------------------------------------------------------------------------
SELECT is(octet_length(idem_fingerprint('{}')), 32,
    'idem_fingerprint can be called (loads the library)');
SELECT results_eq(
    $$SELECT name::text, boot_val, unit, min_val, max_val, context
        FROM pg_catalog.pg_settings
       WHERE name IN ('idempotency.default_ttl', 'idempotency.max_key_length', 'idempotency.retry_after')
       ORDER BY name$$,
    $$VALUES ('idempotency.default_ttl', '86400', 's', '1', '2147483647', 'user'),
             ('idempotency.max_key_length', '255', NULL, '1', '1024', 'user'),
             ('idempotency.retry_after', '1000', 'ms', '1', '2147483647', 'user')$$,
    'settings: default_ttl 86400 s (1 s .. 68 years), max_key_length 255 (1 .. 1024), retry_after 1000 ms, all settable per session');

-------------------------------------------------------------------------------
-- Membership of the extension and pg_dump registration
-------------------------------------------------------------------------------
SELECT has_extension('idempotency', 'extension idempotency is installed');
SELECT set_has(
    $$SELECT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)
        FROM pg_catalog.pg_depend d
       WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass
         AND d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'idempotency')
         AND d.deptype = 'e'$$,
    $$VALUES ('type idem_status'), ('type idem_claim_result'), ('table idempotent_record'),
             ('function idem_claim(text,text,bytea,interval,boolean,interval,interval)'),
             ('function idem_finish(text,jsonb,text,bigint)'),
             ('function idem_fail(text,jsonb,boolean,text,bigint)'),
             ('function idem_lookup(text,text)'),
             ('function idem_fingerprint(jsonb)')$$,
    'the type, table and functions above belong to extension idempotency');
SELECT ok(
    (SELECT 'idempotent_record'::regclass = ANY (extconfig)
       FROM pg_catalog.pg_extension WHERE extname = 'idempotency'),
    'idempotent_record is registered with pg_extension_config_dump (pg_extension.extconfig)');
SELECT is(
    (SELECT extcondition[array_position(extconfig, 'idempotent_record'::regclass)]
       FROM pg_catalog.pg_extension WHERE extname = 'idempotency'),
    '',
    'pg_dump keeps every row of idempotent_record (empty filter condition)');

-------------------------------------------------------------------------------
-- Comments on every object
-------------------------------------------------------------------------------
SELECT isnt(obj_description('idem_status'::regtype, 'pg_type'), NULL,
    'type idem_status has a COMMENT');
SELECT isnt(obj_description('idem_claim_result'::regtype, 'pg_type'), NULL,
    'type idem_claim_result has a COMMENT');
SELECT isnt(obj_description('idempotent_record'::regclass, 'pg_class'), NULL,
    'table idempotent_record has a COMMENT');
SELECT is_empty(
    $$SELECT a.attname::text
        FROM pg_catalog.pg_attribute a
       WHERE a.attrelid = 'idempotent_record'::regclass
         AND a.attnum > 0 AND NOT a.attisdropped
         AND pg_catalog.col_description(a.attrelid, a.attnum) IS NULL$$,
    'every column of idempotent_record has a COMMENT');
SELECT isnt(obj_description('idem_claim(text, text, bytea, interval, boolean, interval, interval)'::regprocedure, 'pg_proc'), NULL,
    'function idem_claim has a COMMENT');
SELECT isnt(obj_description('idem_finish(text, jsonb, text, bigint)'::regprocedure, 'pg_proc'), NULL,
    'function idem_finish has a COMMENT');
SELECT isnt(obj_description('idem_fail(text, jsonb, boolean, text, bigint)'::regprocedure, 'pg_proc'), NULL,
    'function idem_fail has a COMMENT');
SELECT isnt(obj_description('idem_lookup(text, text)'::regprocedure, 'pg_proc'), NULL,
    'function idem_lookup has a COMMENT');
SELECT isnt(obj_description('idem_fingerprint(jsonb)'::regprocedure, 'pg_proc'), NULL,
    'function idem_fingerprint has a COMMENT');
SELECT is_empty(
    $$SELECT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)
        FROM pg_catalog.pg_depend d
       WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass
         AND d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'idempotency')
         AND d.deptype = 'e'
         AND pg_catalog.obj_description(d.objid,
                 CASE d.classid WHEN 'pg_catalog.pg_proc'::regclass THEN 'pg_proc'
                                WHEN 'pg_catalog.pg_class'::regclass THEN 'pg_class'
                                WHEN 'pg_catalog.pg_type'::regclass THEN 'pg_type'
                                ELSE d.classid::regclass::text END) IS NULL$$,
    'every object of the extension has a COMMENT');

SELECT * FROM finish();
ROLLBACK;
