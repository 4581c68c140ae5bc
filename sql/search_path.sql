-- search_path attacks: objects named like the ones the
-- extension uses, in a schema searched before pg_catalog, change nothing.
-- Every planted operator and function raises an error when called.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;

CREATE SCHEMA evil;
CREATE FUNCTION evil.trap() RETURNS boolean LANGUAGE plpgsql
    AS $$BEGIN RAISE EXCEPTION 'planted object called'; END$$;
CREATE FUNCTION evil.eq_text(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT evil.trap()';
CREATE FUNCTION evil.eq_status(idem_status, idem_status) RETURNS boolean LANGUAGE sql AS 'SELECT evil.trap()';
CREATE FUNCTION evil.eq_int8(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT evil.trap()';
CREATE FUNCTION evil.le_ts(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql AS 'SELECT evil.trap()';
CREATE FUNCTION evil.gt_ts(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql AS 'SELECT evil.trap()';
CREATE FUNCTION evil.plus_int8(bigint, integer) RETURNS bigint LANGUAGE plpgsql
    AS $$BEGIN RAISE EXCEPTION 'planted object called'; END$$;
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.eq_text);
CREATE OPERATOR evil.= (LEFTARG = idem_status, RIGHTARG = idem_status, FUNCTION = evil.eq_status);
CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.eq_int8);
CREATE OPERATOR evil.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil.le_ts);
CREATE OPERATOR evil.> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil.gt_ts);
CREATE OPERATOR evil.+ (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = evil.plus_int8);
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS 'SELECT ''2000-01-01''::timestamptz';
CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS 'SELECT ''2000-01-01''::timestamptz';
CREATE FUNCTION evil.sha256(bytea) RETURNS bytea LANGUAGE sql AS 'SELECT ''\x00''::bytea';
CREATE TABLE evil.idempotent_record (LIKE idempotent_record);

-- records to exercise every path: finished, expired, abandoned
BEGIN;
SELECT outcome FROM idem_claim('done', fingerprint => idem_fingerprint('{"a": 1}'));
SELECT idem_finish('done', '{"r": 1}');
SELECT outcome FROM idem_claim('expired');
SELECT idem_finish('expired', '{"r": 2}');
COMMIT;
UPDATE idempotent_record SET expires_at = now() - interval '1 hour' WHERE key = 'expired';
INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
VALUES ('abandoned', 'in_progress', 1, now(), now(), now() + interval '1 day');

-- a new backend, so no statement was prepared before the attack
\c
SET search_path = evil, pg_catalog, public;
-- the planted objects do fire for unqualified SQL
SELECT count(*) FROM public.idempotent_record WHERE key = 'done';
:sqlstate
SELECT count(*) AS planted_table_rows FROM idempotent_record;

SELECT outcome, result FROM public.idem_claim('done', fingerprint => public.idem_fingerprint('{"a": 1.0}'));
SELECT outcome FROM public.idem_claim('done', fingerprint => public.idem_fingerprint('{"a": 2}'));
:sqlstate
BEGIN;
SELECT outcome, fence FROM public.idem_claim('new');
SELECT outcome, fence FROM public.idem_claim('expired');
SELECT outcome, fence FROM public.idem_claim('abandoned');
SELECT outcome FROM public.idem_claim('retry');
SELECT public.idem_finish('new', '{"r": 3}');
SELECT public.idem_fail('expired', '{"e": 4}', false);
SELECT public.idem_finish('abandoned', '{"r": 5}');
SELECT public.idem_fail('retry', '{"e": 6}');
COMMIT;
SELECT outcome, status, result, fence FROM public.idem_claim('new', wait => false);
SELECT key, status, result, fence FROM public.idem_lookup('expired');
SELECT count(*) AS planted_table_rows FROM idempotent_record;
RESET search_path;

SELECT key, status, result, fence,
       created_at > '2001-01-01' AS real_clock
  FROM idempotent_record ORDER BY key;
SET client_min_messages = warning;
DROP SCHEMA evil CASCADE;
RESET client_min_messages;
TRUNCATE idempotent_record;
