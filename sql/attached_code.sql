-- Code another role could have attached to the extension's tables never
-- runs as their owner.  Every table privilege (TRIGGER and REFERENCES
-- too) keeps a role in invoker mode (delegation_modes.sql), and delegated
-- mode refuses (55000) while a table carries any trigger but those the
-- extension and Citus made (a foreign key's check of the table's own
-- rows aside), or while a foreign key references the table: a privilege
-- can be revoked after the trigger or key was made.  Purge refuses such a
-- foreign key in every mode.  attached_code_indirect.sql has the code
-- reached through types, arguments and the caller's session.
\set VERBOSITY terse
\i sql/include/try.sql
TRUNCATE idempotent_record, idempotency_token, idem_scope_grant;
CREATE ROLE regress_ac_trig LOGIN;
CREATE ROLE regress_ac_app LOGIN;
GRANT USAGE, CREATE ON SCHEMA public TO regress_ac_trig;
INSERT INTO idem_scope_grant VALUES ('regress_ac_trig', 'acct_t'), ('regress_ac_app', 'acct_a');
-- another tenant's finished record
INSERT INTO idempotent_record (scope, key, status, fence, result, created_at, updated_at, expires_at)
VALUES ('acct_b', 'done', 'succeeded', 1, '{"order_id": 1}', now(), now(), now() + interval '1 day');

-------------------------------------------------------------------------------
-- The escalation of a role that holds only TRIGGER (tables owned by the
-- superuser who created the extension)
-------------------------------------------------------------------------------
GRANT TRIGGER ON idempotent_record TO regress_ac_trig;
SET ROLE regress_ac_trig;
CREATE FUNCTION regress_ac_spy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'current_user=%', current_user;
    UPDATE idempotent_record SET result = '{"secret": "rewritten"}' WHERE scope = 'acct_b' AND key = 'done';
    EXECUTE 'ALTER ROLE regress_ac_trig SUPERUSER';
    RETURN NEW;
END $$;
CREATE TRIGGER spy AFTER INSERT ON idempotent_record FOR EACH ROW EXECUTE FUNCTION regress_ac_spy();
-- TRIGGER is a table privilege: invoker mode, its own (missing) rights
SELECT outcome FROM idem_claim('x1', scope => 'acct_t', lease => '1 minute');
RESET ROLE;
-- the privilege revoked, the trigger stays: delegated mode refuses it, for
-- this role and for every other one without privileges
REVOKE TRIGGER ON idempotent_record FROM regress_ac_trig;
SET ROLE regress_ac_trig;
SELECT outcome FROM idem_claim('x1', scope => 'acct_t', lease => '1 minute');
SET ROLE regress_ac_app;
SELECT outcome FROM idem_claim('a1', scope => 'acct_a', lease => '1 minute');
RESET ROLE;
-- the role is no superuser, no other tenant's row changed, nothing claimed
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_ac_trig';
SELECT scope, key, status, result FROM idempotent_record ORDER BY scope, key;
DROP TRIGGER spy ON idempotent_record;

-------------------------------------------------------------------------------
-- Every way to attach code, each met by a delegated call on the table it
-- is attached to.  The tables belong to a role that is no superuser, so
-- that "the table's owner" and "a superuser" are told apart.
-------------------------------------------------------------------------------
CREATE ROLE regress_ac_owner NOLOGIN;
GRANT USAGE, CREATE ON SCHEMA public TO regress_ac_owner;
ALTER TABLE idempotent_record OWNER TO regress_ac_owner;
ALTER TABLE idempotency_token OWNER TO regress_ac_owner;
ALTER TABLE idem_scope_grant OWNER TO regress_ac_owner;
-- the attacker's functions and operator (it may replace them at any time)
SET ROLE regress_ac_trig;
CREATE FUNCTION regress_ac_evil() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE NOTICE 'attached code ran as %', current_user; RETURN NEW; END $$;
CREATE FUNCTION regress_ac_pick(text) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
CREATE FUNCTION regress_ac_eq(text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
CREATE OPERATOR === (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_ac_eq);
CREATE TABLE regress_ac_refs (scope text, key text);
CREATE TABLE regress_ac_token_refs (scope text, token text);
RESET ROLE;
-- the owner's own trigger function
SET ROLE regress_ac_owner;
CREATE FUNCTION regress_ac_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RETURN NEW; END $$;
RESET ROLE;

-- pg_temp.attached(ddl, call): makes ddl (as the superuser, as a role
-- that held TRIGGER or REFERENCES did before its privilege was revoked),
-- answers the delegated call of regress_ac_app, and undoes both
CREATE FUNCTION pg_temp.attached(ddl text, call text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    answer text;
BEGIN
    EXECUTE ddl;
    answer := pg_temp.try('SET LOCAL ROLE regress_ac_app; ' || call);
    RAISE EXCEPTION USING ERRCODE = 'ZZ998', MESSAGE = answer;
EXCEPTION
    WHEN SQLSTATE 'ZZ998' THEN RETURN SQLERRM;
END $$;
\set claim '$$SELECT outcome FROM idem_claim(''a2'', scope => ''acct_a'')$$'
\set lookup '$$SELECT count(*) FROM idem_lookup(''done'', ''acct_a'')$$'
\set token '$$SELECT length(idem_token_issue(''acct_a'')) > 0$$'
SELECT attached, pg_temp.attached(ddl, call) AS answer FROM (VALUES
  ('row trigger', :claim,
   $$CREATE TRIGGER t BEFORE INSERT ON idempotent_record FOR EACH ROW EXECUTE FUNCTION regress_ac_evil()$$),
  ('statement trigger, met by a lookup', :lookup,
   $$CREATE TRIGGER t AFTER UPDATE ON idempotent_record FOR EACH STATEMENT EXECUTE FUNCTION regress_ac_evil()$$),
  ('truncate trigger', :claim,
   $$CREATE TRIGGER t BEFORE TRUNCATE ON idempotent_record EXECUTE FUNCTION regress_ac_evil()$$),
  ('deferred constraint trigger', :claim,
   $$CREATE CONSTRAINT TRIGGER t AFTER INSERT ON idempotent_record DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION regress_ac_evil()$$),
  ('disabled trigger (the owner may enable it)', :claim,
   $$CREATE TRIGGER t BEFORE INSERT ON idempotent_record FOR EACH ROW EXECUTE FUNCTION regress_ac_evil(); ALTER TABLE idempotent_record DISABLE TRIGGER t$$),
  ('owner''s function, attacker''s function in WHEN', :claim,
   $$CREATE TRIGGER t BEFORE INSERT ON idempotent_record FOR EACH ROW WHEN (regress_ac_pick(NEW.key)) EXECUTE FUNCTION regress_ac_audit()$$),
  ('owner''s function, attacker''s operator in WHEN', :claim,
   $$CREATE TRIGGER t BEFORE INSERT ON idempotent_record FOR EACH ROW WHEN (NEW.key === 'x') EXECUTE FUNCTION regress_ac_audit()$$),
  ('trigger on idempotency_token', :token,
   $$CREATE TRIGGER t BEFORE INSERT ON idempotency_token FOR EACH ROW EXECUTE FUNCTION regress_ac_evil()$$),
  ('trigger on idem_scope_grant (grants could be forged)', :lookup,
   $$CREATE TRIGGER t AFTER INSERT ON idem_scope_grant FOR EACH ROW EXECUTE FUNCTION regress_ac_evil()$$),
  ('foreign key ON DELETE CASCADE', :claim,
   $$ALTER TABLE regress_ac_refs ADD FOREIGN KEY (scope, key) REFERENCES idempotent_record ON DELETE CASCADE ON UPDATE CASCADE$$),
  ('foreign key ON DELETE RESTRICT', :lookup,
   $$ALTER TABLE regress_ac_refs ADD FOREIGN KEY (scope, key) REFERENCES idempotent_record ON DELETE RESTRICT$$),
  ('foreign key to idempotency_token', :token,
   $$ALTER TABLE regress_ac_token_refs ADD FOREIGN KEY (scope, token) REFERENCES idempotency_token ON DELETE SET NULL$$),
  -- nor what the owner or a superuser wrote: who made the trigger, who
  -- chose its arguments and what its code resolves are unknown
  ('owner''s function', :claim,
   $$CREATE TRIGGER t BEFORE INSERT ON idempotent_record FOR EACH ROW EXECUTE FUNCTION regress_ac_audit()$$),
  ('superuser''s function', :claim,
   $$CREATE TRIGGER t BEFORE UPDATE ON idempotent_record FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()$$),
  ('owner''s function, built-in operator in WHEN', :claim,
   $$CREATE TRIGGER t BEFORE INSERT ON idempotent_record FOR EACH ROW WHEN (NEW.key <> 'x') EXECUTE FUNCTION regress_ac_audit()$$),
  -- a foreign key of the record table itself runs: its check reads the
  -- referenced table (as that table's owner), no code of anyone
  ('foreign key from idempotent_record', :claim,
   $$CREATE TABLE regress_ac_tenants (scope text PRIMARY KEY); INSERT INTO regress_ac_tenants VALUES ('acct_a'), ('acct_b'); ALTER TABLE regress_ac_tenants OWNER TO regress_ac_trig; ALTER TABLE idempotent_record ADD FOREIGN KEY (scope) REFERENCES regress_ac_tenants$$)
) AS v(attached, call, ddl);

-- the same refusal, message in full
\set VERBOSITY default
CREATE TRIGGER t BEFORE INSERT ON idempotent_record FOR EACH ROW EXECUTE FUNCTION regress_ac_evil();
SET ROLE regress_ac_app;
SELECT outcome FROM idem_claim('a3', scope => 'acct_a');
RESET ROLE;
DROP TRIGGER t ON idempotent_record;
-- the refused calls wrote nothing
SELECT scope, key, status FROM idempotent_record ORDER BY scope, key;

-------------------------------------------------------------------------------
-- The extension's own trigger functions are no pass: delegated mode trusts
-- the triggers the extension made (idem_scope_grant_changed on
-- idem_scope_grant: that table, that name, that definition), not every
-- trigger that calls a function of the extension.  A role that held
-- TRIGGER attached idem_version_guard('fence'): run as the owner, each
-- delegated write bumped the fence, and the worker's outcome met IK003.
-------------------------------------------------------------------------------
SET ROLE regress_ac_app;
SELECT outcome, fence FROM idem_claim('v1', scope => 'acct_a', lease => '1 minute');
RESET ROLE;
GRANT TRIGGER ON idempotent_record TO regress_ac_trig;
SET ROLE regress_ac_trig;
CREATE TRIGGER fence_bump BEFORE UPDATE ON idempotent_record
    FOR EACH ROW EXECUTE FUNCTION idem_version_guard('fence');
RESET ROLE;
REVOKE TRIGGER ON idempotent_record FROM regress_ac_trig;
-- the worker's checkpoint and outcome are refused, naming the trigger
SET ROLE regress_ac_app;
SELECT idem_checkpoint('v1', 'phase 1', scope => 'acct_a', fence => 1);
SELECT idem_finish('v1', '{"paid": true}', scope => 'acct_a', fence => 1);
RESET ROLE;
-- and the fence never moved: once the trigger is gone, the outcome lands
SELECT status, fence, recovery_point FROM idempotent_record WHERE scope = 'acct_a' AND key = 'v1';
DROP TRIGGER fence_bump ON idempotent_record;
SET ROLE regress_ac_app;
SELECT idem_finish('v1', '{"paid": true}', scope => 'acct_a', fence => 1);
RESET ROLE;
SELECT status, fence, result FROM idempotent_record WHERE scope = 'acct_a' AND key = 'v1';

-- each attached by someone (here the superuser), met by a delegated write
-- of a leased claim or, on idem_scope_grant, a lookup (which reads the grants)
SET ROLE regress_ac_app;
SELECT outcome, fence FROM idem_claim('v2', scope => 'acct_a', lease => '1 minute');
RESET ROLE;
\set finish '$$SELECT idem_finish(''v2'', ''{}'', scope => ''acct_a'', fence => 1)$$'
\set checkpoint '$$SELECT idem_checkpoint(''v2'', ''p'', scope => ''acct_a'', fence => 1)$$'
\set grants_changed 'AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idem_scope_grant FOR EACH STATEMENT EXECUTE FUNCTION idem_scope_grants_changed'
SELECT attached, pg_temp.attached(ddl, call) AS answer FROM (VALUES
  ('idem_version_guard(''fence''), met by a finish', :finish,
   $$CREATE TRIGGER fence_bump BEFORE UPDATE ON idempotent_record FOR EACH ROW EXECUTE FUNCTION idem_version_guard('fence')$$),
  ('idem_transition_guard on status', :finish,
   $$CREATE TRIGGER status_guard BEFORE UPDATE ON idempotent_record FOR EACH ROW EXECUTE FUNCTION idem_transition_guard('status', 'in_progress>failed')$$),
  ('idem_transition_guard, met by a checkpoint', :checkpoint,
   $$CREATE TRIGGER status_guard AFTER INSERT OR UPDATE ON idempotent_record FOR EACH ROW EXECUTE FUNCTION idem_transition_guard('status', '>in_progress')$$),
  ('the extension''s trigger copied under another name', :lookup,
   'CREATE TRIGGER grants_copy ' || :'grants_changed' || '()'),
  ('the extension''s trigger copied to idempotent_record', :finish,
   $$CREATE TRIGGER idem_scope_grant_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idempotent_record FOR EACH STATEMENT EXECUTE FUNCTION idem_scope_grants_changed()$$),
  ('its name with other arguments (the original dropped)', :lookup,
   'DROP TRIGGER idem_scope_grant_changed ON idem_scope_grant; CREATE TRIGGER idem_scope_grant_changed ' || :'grants_changed' || '(''x'')'),
  ('its name, a row trigger (the original dropped)', :lookup,
   $$DROP TRIGGER idem_scope_grant_changed ON idem_scope_grant; CREATE TRIGGER idem_scope_grant_changed AFTER INSERT ON idem_scope_grant FOR EACH ROW EXECUTE FUNCTION idem_scope_grants_changed()$$),
  ('its name and definition with a WHEN clause (the original dropped)', :lookup,
   'DROP TRIGGER idem_scope_grant_changed ON idem_scope_grant; CREATE TRIGGER idem_scope_grant_changed AFTER INSERT OR UPDATE OR DELETE ON idem_scope_grant FOR EACH STATEMENT WHEN (regress_ac_pick(''x'')) EXECUTE FUNCTION idem_scope_grants_changed()'),
  -- the extension's own, as its script made it (ENABLE ALWAYS), and
  -- disabled: trusted
  ('the extension''s own trigger', :lookup, 'SELECT 1'),
  ('the extension''s own trigger, disabled by the owner', :lookup,
   'ALTER TABLE idem_scope_grant DISABLE TRIGGER idem_scope_grant_changed')
) AS v(attached, call, ddl);
-- nothing was written: v2 is held with fence 1
SELECT status, fence, recovery_point FROM idempotent_record WHERE scope = 'acct_a' AND key = 'v2';
DELETE FROM idempotent_record WHERE key IN ('v1', 'v2');

-------------------------------------------------------------------------------
-- A foreign key that references a table stops purge in every mode (here
-- the superuser's): one referenced row would fail the whole batch
-------------------------------------------------------------------------------
UPDATE idempotent_record SET expires_at = created_at, updated_at = created_at;
ALTER TABLE regress_ac_refs ADD FOREIGN KEY (scope, key) REFERENCES idempotent_record ON DELETE RESTRICT;
INSERT INTO regress_ac_refs VALUES ('acct_b', 'done');
SELECT idem_purge(10);
\set VERBOSITY terse
ALTER TABLE regress_ac_refs DROP CONSTRAINT regress_ac_refs_scope_key_fkey;
ALTER TABLE regress_ac_token_refs ADD FOREIGN KEY (scope, token) REFERENCES idempotency_token;
SELECT idem_purge(10);
ALTER TABLE regress_ac_token_refs DROP CONSTRAINT regress_ac_token_refs_scope_token_fkey;
-- without them, purge runs
SELECT idem_purge(10);

-- a delegated call works again
SET ROLE regress_ac_app;
SELECT outcome FROM idem_claim('a4', scope => 'acct_a', lease => '1 minute');
RESET ROLE;

-- clean up
ALTER TABLE idempotent_record OWNER TO CURRENT_USER;
ALTER TABLE idempotency_token OWNER TO CURRENT_USER;
ALTER TABLE idem_scope_grant OWNER TO CURRENT_USER;
TRUNCATE idempotent_record, idempotency_token, idem_scope_grant;
DROP OWNED BY regress_ac_trig, regress_ac_owner;
REVOKE USAGE, CREATE ON SCHEMA public FROM regress_ac_trig, regress_ac_owner;
DROP ROLE regress_ac_trig, regress_ac_app, regress_ac_owner;
