-- The SQL surface of the extension as a user sees it: its objects, the
-- types and tables as \d shows them, every function's arguments, result
-- and attributes, comments, pg_dump registration and settings.
-- (LOAD: the settings are defined when the library is loaded, which a
-- server without shared_preload_libraries has not done yet)
LOAD 'idempotency';
-- the extension's objects (what \dx+ lists; PostgreSQL 17 and later also
-- list the row and array types that come with the tables, views and
-- types, which are left out here so that every major shows the same)
CREATE TEMP VIEW members AS
SELECT d.classid, d.objid, pg_describe_object(d.classid, d.objid, 0) AS object
  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'idempotency'
 WHERE d.deptype = 'e'
   AND NOT EXISTS (SELECT FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
                    WHERE d.classid = 'pg_type'::regclass AND t.oid = d.objid
                      AND (t.typcategory = 'A' OR c.relkind IN ('r', 'v', 'p', 'f', 'm')));
SELECT object FROM members ORDER BY 1;
SELECT enum_range(NULL::idem_status) AS idem_status_labels;
-- (the expiry index's origin shows in the session's TimeZone: UTC here,
-- whichever zone the session has)
SET TimeZone = 'UTC';
\d idem_claim_result
\d idempotent_record
\d idempotency_token
\d idempotency_outbox
RESET TimeZone;

-- arguments and defaults of every function and procedure
SELECT p.proname AS function, pg_get_function_arguments(p.oid) AS arguments
  FROM pg_proc p JOIN members m ON m.classid = 'pg_proc'::regclass AND m.objid = p.oid
 ORDER BY 1, 2;
-- what each returns; none is STRICT (a NULL is an error, never a silent
-- NULL) or SECURITY DEFINER (a role without table privileges works as the
-- tables' owner only inside a call, after its scope check); only
-- idem_fingerprint is IMMUTABLE (it may back an index); whether EXECUTE is
-- granted to PUBLIC
SELECT p.proname AS function,
       CASE WHEN p.proretset THEN 'SETOF ' ELSE '' END || p.prorettype::regtype AS returns,
       p.provolatile AS volatility, p.proisstrict AS strict, p.prosecdef AS definer,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
  FROM pg_proc p JOIN members m ON m.classid = 'pg_proc'::regclass AND m.objid = p.oid
 ORDER BY 1, 2;
-- the views run with the caller's privileges (security_invoker), except
-- the counters, which show aggregates only
SELECT c.relname AS view, coalesce(c.reloptions, '{}') AS options
  FROM pg_class c JOIN members m ON m.classid = 'pg_class'::regclass AND m.objid = c.oid
 WHERE c.relkind = 'v'
 ORDER BY 1;

-- every object of the extension, and every column of its tables, has
-- a COMMENT
SELECT object AS without_comment
  FROM members WHERE obj_description(objid, classid::regclass::name) IS NULL
UNION ALL
SELECT format('column %s.%s', a.attrelid::regclass, a.attname)
  FROM pg_attribute a
 WHERE a.attrelid IN ('idempotent_record'::regclass, 'idempotency_token'::regclass,
                      'idempotency_outbox'::regclass)
   AND a.attnum > 0 AND NOT a.attisdropped AND col_description(a.attrelid, a.attnum) IS NULL;

-- pg_dump keeps every row of the tables and the outbox's fence sequence
-- (empty filter conditions)
SELECT extconfig::regclass[] AS dumped_tables, extcondition FROM pg_extension WHERE extname = 'idempotency';

-- the settings, their defaults and ranges; each can be set per session
-- (idempotency.stats_databases, which exists only when the library is
-- preloaded, is in stats.sql)
SELECT name, boot_val, unit, min_val, max_val, context
  FROM pg_settings WHERE name LIKE 'idempotency.%' AND name <> 'idempotency.stats_databases'
 ORDER BY name;
