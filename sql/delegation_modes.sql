-- Which mode a role's calls get: invoker mode (its own privileges, each
-- statement checked by PostgreSQL) as soon as it holds any privilege on
-- the table or one of its columns, delegated mode (the scope grants, then
-- the table's owner) only with none.  Every privilege the server can
-- grant on a table is tried, read from the catalog, so that one a future
-- major adds cannot silently lead into delegated mode.
\set VERBOSITY terse
\i sql/include/try.sql
TRUNCATE idempotent_record, idempotency_token, idem_scope_grant;
CREATE ROLE regress_dm_app LOGIN;
INSERT INTO idem_scope_grant VALUES ('regress_dm_app', 'acct');

-- pg_temp.mode_with(grants): the mode of regress_dm_app's calls of
-- idem_claim and idem_token_issue while it holds grants (undone after).
-- Delegated mode claims; invoker mode without SELECT and INSERT is refused
-- by PostgreSQL on the table itself.
CREATE FUNCTION pg_temp.mode_with(grants text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    claim text;
    token text;
BEGIN
    IF grants <> '' THEN
        EXECUTE grants;
    END IF;
    claim := pg_temp.try($q$SET LOCAL ROLE regress_dm_app;
                            SELECT outcome FROM idem_claim('k', scope => 'acct')$q$);
    token := pg_temp.try($q$SET LOCAL ROLE regress_dm_app;
                            SELECT idem_token_issue('acct') IS NOT NULL$q$);
    RAISE EXCEPTION USING ERRCODE = 'ZZ998', MESSAGE =
        format('records: %s, tokens: %s',
               CASE WHEN claim = 'ok claimed' THEN 'delegated'
                    WHEN claim = '42501 permission denied for table idempotent_record' THEN 'invoker'
                    ELSE claim END,
               CASE WHEN token = 'ok true' THEN 'delegated'
                    WHEN token = '42501 permission denied for table idempotency_token' THEN 'invoker'
                    ELSE token END);
EXCEPTION
    WHEN SQLSTATE 'ZZ998' THEN RETURN SQLERRM;
END $$;

-- no privilege: delegated mode on both tables
SELECT pg_temp.mode_with('') AS no_privilege;

-- each table privilege PostgreSQL 15 knows, alone, on the record table
SELECT privilege, pg_temp.mode_with(format('GRANT %s ON idempotent_record TO regress_dm_app', privilege)) AS modes
  FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS privilege;

-- each column privilege, alone, on one column
SELECT privilege, pg_temp.mode_with(format('GRANT %s (result) ON idempotent_record TO regress_dm_app', privilege)) AS modes
  FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'REFERENCES']) AS privilege;

-- a privilege through a role the caller is a member of, and on the token
-- table only (each table has its own mode)
CREATE ROLE regress_dm_group;
GRANT regress_dm_group TO regress_dm_app;
SELECT pg_temp.mode_with('GRANT TRIGGER ON idempotent_record TO regress_dm_group') AS via_membership,
       pg_temp.mode_with('GRANT TRIGGER ON idempotency_token TO regress_dm_app') AS token_table_only;

-- every privilege this server can grant on a table (the owner's default
-- rights: MAINTAIN too from PostgreSQL 17), on each table: none leaves
-- the role in delegated mode
WITH privileges AS (
    SELECT DISTINCT privilege_type AS privilege
      FROM aclexplode(acldefault('r', 'regress_dm_group'::regrole))
), modes AS (
    SELECT privilege,
           pg_temp.mode_with(format('GRANT %1$s ON idempotent_record TO regress_dm_app; GRANT %1$s ON idempotency_token TO regress_dm_app', privilege)) AS modes
      FROM privileges
)
SELECT count(*) >= 7 AS all_privileges_tried,
       coalesce(string_agg(privilege || ' → ' || modes, '; ') FILTER (WHERE modes <> 'records: invoker, tokens: invoker'), 'none') AS not_invoker
  FROM modes;

-- clean up
TRUNCATE idempotent_record, idempotency_token, idem_scope_grant;
DROP ROLE regress_dm_app, regress_dm_group;
