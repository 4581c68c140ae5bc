-- search_path attacks on the paths search_path.sql does not take (DESIGN
-- §5.5): leased claims and takeovers, checkpoint, extend_lease,
-- mark_unknown, fenced finish, wait => false, idem_once, idem_pending,
-- idem_purge and idem_purge_all.  Every planted operator and function
-- raises an error when called; a planted table stays empty.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;

CREATE SCHEMA evil_lease;
CREATE FUNCTION evil_lease.trap() RETURNS boolean LANGUAGE plpgsql
    AS $$BEGIN RAISE EXCEPTION 'planted object called'; END$$;
CREATE FUNCTION evil_lease.b_text(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT evil_lease.trap()';
CREATE FUNCTION evil_lease.b_status(idem_status, idem_status) RETURNS boolean LANGUAGE sql AS 'SELECT evil_lease.trap()';
CREATE FUNCTION evil_lease.b_int8(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT evil_lease.trap()';
CREATE FUNCTION evil_lease.b_int84(bigint, integer) RETURNS boolean LANGUAGE sql AS 'SELECT evil_lease.trap()';
CREATE FUNCTION evil_lease.b_ts(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql AS 'SELECT evil_lease.trap()';
CREATE FUNCTION evil_lease.plus_int8(bigint, integer) RETURNS bigint LANGUAGE plpgsql
    AS $$BEGIN RAISE EXCEPTION 'planted object called'; END$$;
CREATE FUNCTION evil_lease.plus_ts(timestamptz, interval) RETURNS timestamptz LANGUAGE plpgsql
    AS $$BEGIN RAISE EXCEPTION 'planted object called'; END$$;
CREATE OPERATOR evil_lease.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil_lease.b_text);
CREATE OPERATOR evil_lease.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = evil_lease.b_text);
CREATE OPERATOR evil_lease.= (LEFTARG = idem_status, RIGHTARG = idem_status, FUNCTION = evil_lease.b_status);
CREATE OPERATOR evil_lease.<> (LEFTARG = idem_status, RIGHTARG = idem_status, FUNCTION = evil_lease.b_status);
CREATE OPERATOR evil_lease.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil_lease.b_int8);
CREATE OPERATOR evil_lease.< (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = evil_lease.b_int84);
CREATE OPERATOR evil_lease.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil_lease.b_ts);
CREATE OPERATOR evil_lease.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil_lease.b_ts);
CREATE OPERATOR evil_lease.> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil_lease.b_ts);
CREATE OPERATOR evil_lease.>= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil_lease.b_ts);
CREATE OPERATOR evil_lease.+ (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = evil_lease.plus_int8);
CREATE OPERATOR evil_lease.+ (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = evil_lease.plus_ts);
CREATE FUNCTION evil_lease.now() RETURNS timestamptz LANGUAGE sql AS 'SELECT ''2000-01-01''::timestamptz';
CREATE FUNCTION evil_lease.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS 'SELECT ''2000-01-01''::timestamptz';
CREATE FUNCTION evil_lease.coalesce(bytea, bytea) RETURNS bytea LANGUAGE sql AS 'SELECT ''\x00''::bytea';
CREATE TABLE evil_lease.idempotent_record (LIKE idempotent_record);

-- records for every path: expired (purge), an ended lease (takeover)
INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
SELECT 'old-' || i, 'succeeded', 1, now(), now(), now() - interval '1 hour'
  FROM generate_series(1, 5) i;
INSERT INTO idempotent_record (key, status, fence, recovery_point, locked_until, created_at, updated_at, expires_at)
VALUES ('ended', 'in_progress', 4, 'charged', now() - interval '1 second', now(), now(), now() + interval '1 day');

-- a new backend: nothing was prepared before the attack
\c
SET search_path = evil_lease, pg_catalog, public;
-- the planted objects do fire for unqualified SQL
SELECT count(*) FROM public.idempotent_record WHERE key = 'ended';
:sqlstate

SELECT outcome, status, fence, retry_after IS NULL AS no_hint
  FROM public.idem_claim('pay', lease => '1 hour', fingerprint => '\x01');
SELECT outcome, status, fence, retry_after = '1 second' AS hint
  FROM public.idem_claim('pay', wait => false);
SELECT outcome FROM public.idem_claim('pay', fingerprint => '\x02', wait => false);
:sqlstate
SELECT public.idem_checkpoint('pay', 'authorized', fence => 1);
SELECT public.idem_extend_lease('pay', '2 hours', fence => 1) OPERATOR(pg_catalog.>) '2001-01-01' AS extended;
SELECT public.idem_finish('pay', '{"stale": true}', fence => 0);
:sqlstate
SELECT public.idem_mark_unknown('pay', '{"provider": "timeout"}', fence => 1);
SELECT scope, key, status, fence, detail FROM public.idem_pending ORDER BY key;
SELECT public.idem_finish('pay', '{"charge": "ch_1"}', fence => 1);
SELECT outcome, status, result, recovery_point FROM public.idem_claim('pay', fingerprint => '\x01', wait => false);
-- takeover of an ended lease keeps the recovery point, fence + 1
SELECT outcome, fence, recovery_point FROM public.idem_claim('ended', lease => '1 minute', fingerprint => '\x03');
SELECT public.idem_fail('ended', '{"declined": true}', retryable => false, fence => 5);
-- idem_once
BEGIN;
SELECT public.idem_once('msg-1', scope => 'consumer') AS first,
       public.idem_once('msg-1', scope => 'consumer') AS again;
COMMIT;
SELECT public.idem_once('msg-1', scope => 'consumer') AS redelivered;
-- purge
SELECT public.idem_purge(2) AS purged;
CALL public.idem_purge_all(2);
SELECT count(*) AS planted_table_rows FROM idempotent_record;
RESET search_path;

SELECT scope, key, status, result, recovery_point, fence, fingerprint,
       locked_until IS NULL AS no_lease, created_at > '2001-01-01' AS real_clock
  FROM idempotent_record ORDER BY scope, key;
SET client_min_messages = warning;
DROP SCHEMA evil_lease CASCADE;
RESET client_min_messages;
TRUNCATE idempotent_record;
