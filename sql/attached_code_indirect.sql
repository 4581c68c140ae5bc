-- Code of a role without privileges must not run as the tables' owner
-- when it is reached indirectly: through a type that the WHEN clause of a
-- trigger with a superuser's function uses (a domain's CHECK, a cast to
-- json), through arguments given to a superuser's trigger function, or
-- through the caller's session, whose search_path and temporary tables
-- decide what a trigger function written by the owner (no pinned
-- search_path) resolves its names to.  Delegated mode runs no trigger but
-- those the extension and Citus made, so each is refused (55000).  The
-- attacker's payload says so with a NOTICE whenever it runs as another
-- role: no NOTICE may appear below.
\set VERBOSITY terse
\i sql/include/try.sql
TRUNCATE idempotent_record, idempotency_token, idem_scope_grant;
CREATE ROLE regress_ai_evil LOGIN;
GRANT USAGE, CREATE ON SCHEMA public TO regress_ai_evil;
INSERT INTO idem_scope_grant VALUES ('regress_ai_evil', 'acct_e');
-- another tenant's finished record
INSERT INTO idempotent_record (scope, key, status, fence, result, created_at, updated_at, expires_at)
VALUES ('acct_b', 'done', 'succeeded', 1, '{"order_id": 1}', now(), now(), now() + interval '1 day');
-- a trigger function of the superuser who owns the tables
CREATE FUNCTION regress_ai_noop() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RETURN NEW; END $$;

-- the attacker's payload, and the ways it reaches it
SET ROLE regress_ai_evil;
CREATE FUNCTION regress_ai_payload() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF current_user <> 'regress_ai_evil' THEN
        RAISE NOTICE 'the attacker''s code ran as another role';
        UPDATE idempotent_record SET result = '{"secret": "rewritten"}' WHERE scope = 'acct_b';
        ALTER ROLE regress_ai_evil SUPERUSER;
    END IF;
    RETURN true;
END $$;
CREATE DOMAIN regress_ai_checked AS text CHECK (regress_ai_payload());
CREATE TYPE regress_ai_label AS ENUM ('x');
CREATE FUNCTION regress_ai_label_json(regress_ai_label) RETURNS json LANGUAGE sql
    AS $$ SELECT to_json(regress_ai_payload()) $$;
CREATE CAST (regress_ai_label AS json) WITH FUNCTION regress_ai_label_json(regress_ai_label);
CREATE FUNCTION regress_ai_payload_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM regress_ai_payload(); RETURN NEW; END $$;
RESET ROLE;

-------------------------------------------------------------------------------
-- A trigger the role made while it held TRIGGER (revoked since), with a
-- superuser's function and its own code behind a type in the WHEN clause.
-- Nor may a superuser's function act on the role's arguments as the
-- owner: lo_manage,
-- of the trusted extension lo (any role with CREATE on the database may
-- install it; its functions belong to the bootstrap superuser), would
-- unlink a large object the role names.
-------------------------------------------------------------------------------
CREATE EXTENSION lo;
CREATE FUNCTION pg_temp.made_with_trigger(trigger text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    answer text;
BEGIN
    GRANT TRIGGER ON idempotent_record TO regress_ai_evil;
    SET LOCAL ROLE regress_ai_evil;
    EXECUTE trigger;
    RESET ROLE;
    REVOKE TRIGGER ON idempotent_record FROM regress_ai_evil;
    answer := pg_temp.try_code($q$SET LOCAL ROLE regress_ai_evil;
                                  SELECT outcome FROM idem_claim('w1', scope => 'acct_e')$q$);
    RAISE EXCEPTION USING ERRCODE = 'ZZ998', MESSAGE = answer;
EXCEPTION
    WHEN SQLSTATE 'ZZ998' THEN RETURN SQLERRM;
END $$;
SELECT reached, pg_temp.made_with_trigger(trigger) AS answer FROM (VALUES
  ('a domain''s CHECK in WHEN',
   $$CREATE TRIGGER t BEFORE INSERT ON idempotent_record FOR EACH ROW WHEN (NEW.key::regress_ai_checked IS NOT NULL) EXECUTE FUNCTION regress_ai_noop()$$),
  ('a cast to json in WHEN',
   $$CREATE TRIGGER t BEFORE INSERT ON idempotent_record FOR EACH ROW WHEN (to_json('x'::regress_ai_label) IS NOT NULL AND NEW.key IS NOT NULL) EXECUTE FUNCTION regress_ai_noop()$$)
) AS v(reached, trigger);
-- the large object the role names survives: its claim is refused
SELECT lo_create(0) AS regress_ai_lo \gset
DO $$
BEGIN
    GRANT TRIGGER ON idempotent_record TO regress_ai_evil;
    SET LOCAL ROLE regress_ai_evil;
    CREATE TRIGGER t BEFORE UPDATE OR DELETE ON idempotent_record FOR EACH ROW EXECUTE FUNCTION lo_manage('recovery_point');
    RESET ROLE;
    REVOKE TRIGGER ON idempotent_record FROM regress_ai_evil;
END $$;
SET ROLE regress_ai_evil;
SELECT left(a, 5) AS checkpoints
  FROM pg_temp.try(format($q$SELECT outcome FROM idem_claim('lo', scope => 'acct_e');
                             SELECT idem_checkpoint('lo', %L, 'acct_e');
                             SELECT idem_checkpoint('lo', 'x', 'acct_e');
                             SELECT idem_finish('lo', '{}', 'acct_e')$q$, :'regress_ai_lo'), NULL, true) AS a;
RESET ROLE;
SELECT count(lo_unlink(oid)) AS large_object_kept FROM pg_largeobject_metadata WHERE oid = :'regress_ai_lo'::oid;
DROP TRIGGER t ON idempotent_record;


-------------------------------------------------------------------------------
-- The owner's own trigger function, with unqualified names and no pinned
-- search_path, meets the caller's session: a temporary table of the same
-- name (with the attacker's trigger), a function of the same name in a
-- schema ahead of pg_catalog.  The owner's trigger is refused too: the
-- attacker's code does not run as the owner.
-------------------------------------------------------------------------------
CREATE TABLE regress_ai_audit_log (k text);
CREATE FUNCTION regress_ai_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_ai_audit_log VALUES (lower(NEW.key));
    RETURN NEW;
END $$;
CREATE TRIGGER audit AFTER INSERT ON idempotent_record FOR EACH ROW EXECUTE FUNCTION regress_ai_audit();
CREATE SCHEMA regress_ai_evil_schema AUTHORIZATION regress_ai_evil;
SET ROLE regress_ai_evil;
CREATE FUNCTION regress_ai_evil_schema.lower(text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.regress_ai_payload(); RETURN $1; END $$;
RESET ROLE;
SELECT reached, answer
  FROM (VALUES
  ('a temporary table of the caller',
   $$SET LOCAL ROLE regress_ai_evil;
     CREATE TEMP TABLE regress_ai_audit_log (k text) ON COMMIT DROP;
     CREATE TRIGGER t BEFORE INSERT ON pg_temp.regress_ai_audit_log FOR EACH ROW EXECUTE FUNCTION public.regress_ai_payload_trigger();
     SELECT outcome FROM public.idem_claim('s1', scope => 'acct_e')$$),
  ('a function in a schema ahead of pg_catalog',
   $$SET LOCAL ROLE regress_ai_evil;
     SET LOCAL search_path = regress_ai_evil_schema, pg_catalog, public;
     SELECT outcome FROM public.idem_claim('s2', scope => 'acct_e')$$)
) AS v(reached, call), LATERAL pg_temp.try_code(call) AS answer;
DROP TRIGGER audit ON idempotent_record;

-- the role is no superuser, no other tenant's row changed
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_ai_evil';
SELECT scope, key, status, result FROM idempotent_record WHERE scope = 'acct_b';

-- clean up
TRUNCATE idempotent_record, idempotency_token, idem_scope_grant;
DROP TABLE regress_ai_audit_log;
DROP FUNCTION regress_ai_audit(), regress_ai_noop();
DROP CAST (regress_ai_label AS json);
DROP OWNED BY regress_ai_evil;
DROP EXTENSION lo;
REVOKE USAGE, CREATE ON SCHEMA public FROM regress_ai_evil;
DROP ROLE regress_ai_evil;
