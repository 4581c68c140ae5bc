-- A scope grant removed with session_replication_role = replica (as a
-- logical replication subscriber applies it, or pg_restore
-- --disable-triggers) is dropped from the cached grants all the same: the
-- next call of a session that already used it is refused (42501).
\set VERBOSITY terse
\i sql/include/try.sql
TRUNCATE idempotent_record, idem_scope_grant;
CREATE ROLE regress_gr_app;
INSERT INTO idem_scope_grant VALUES ('regress_gr_app', 'acct');
-- the grant is read and cached by this backend
SET ROLE regress_gr_app;
SELECT pg_temp.try_code($$SELECT outcome FROM idem_claim('k', scope => 'acct')$$) AS while_granted;
RESET ROLE;
SET session_replication_role = replica;
DELETE FROM idem_scope_grant WHERE grantee = 'regress_gr_app';
RESET session_replication_role;
SELECT count(*) AS grants_left FROM idem_scope_grant;
SET ROLE regress_gr_app;
SELECT pg_temp.try_code($$SELECT outcome FROM idem_claim('k', scope => 'acct')$$) AS after_removal,
       idem_scope_permitted('acct') AS permitted;
RESET ROLE;
-- the trigger that sends the invalidation fires whatever the role
SELECT tgenabled FROM pg_trigger WHERE tgname = 'idem_scope_grant_changed';

-- clean up
TRUNCATE idempotent_record, idem_scope_grant;
DROP ROLE regress_gr_app;
