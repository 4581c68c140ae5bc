-- search_path attacks: objects named like the ones the extension uses, in
-- a schema searched before pg_catalog, change nothing on any path: claims,
-- replays, takeovers of abandoned, expired and leased records, fenced
-- outcomes, checkpoint, extend_lease, mark_unknown, idem_pending,
-- idem_once, idem_purge and idem_purge_all.  Every planted operator and
-- function raises an error or lies when called; the planted table stays
-- empty.  (Tokens: tokens.sql; idem_transition: transition.sql.)
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;

CREATE SCHEMA evil;
CREATE FUNCTION evil.trap() RETURNS boolean LANGUAGE plpgsql
    AS $$BEGIN RAISE EXCEPTION 'planted object called'; END$$;
CREATE FUNCTION evil.b_text(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT evil.trap()';
CREATE FUNCTION evil.b_status(idem_status, idem_status) RETURNS boolean LANGUAGE sql AS 'SELECT evil.trap()';
CREATE FUNCTION evil.b_int8(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT evil.trap()';
CREATE FUNCTION evil.b_int84(bigint, integer) RETURNS boolean LANGUAGE sql AS 'SELECT evil.trap()';
CREATE FUNCTION evil.b_ts(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql AS 'SELECT evil.trap()';
CREATE FUNCTION evil.plus_int8(bigint, integer) RETURNS bigint LANGUAGE plpgsql
    AS $$BEGIN RAISE EXCEPTION 'planted object called'; END$$;
CREATE FUNCTION evil.plus_ts(timestamptz, interval) RETURNS timestamptz LANGUAGE plpgsql
    AS $$BEGIN RAISE EXCEPTION 'planted object called'; END$$;
-- one operator of each name and argument types the extension compares with
DO $$
DECLARE
    o record;
BEGIN
    FOR o IN SELECT * FROM (VALUES
        ('=', 'text', 'text', 'b_text'), ('<>', 'text', 'text', 'b_text'),
        ('=', 'idem_status', 'idem_status', 'b_status'), ('<>', 'idem_status', 'idem_status', 'b_status'),
        ('=', 'bigint', 'bigint', 'b_int8'), ('<', 'bigint', 'integer', 'b_int84'),
        ('<=', 'timestamptz', 'timestamptz', 'b_ts'), ('<', 'timestamptz', 'timestamptz', 'b_ts'),
        ('>', 'timestamptz', 'timestamptz', 'b_ts'), ('>=', 'timestamptz', 'timestamptz', 'b_ts'),
        ('+', 'bigint', 'integer', 'plus_int8'), ('+', 'timestamptz', 'interval', 'plus_ts')) AS v(op, l, r, fn)
    LOOP
        EXECUTE format('CREATE OPERATOR evil.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = evil.%I)', o.op, o.l, o.r, o.fn);
    END LOOP;
END $$;
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS 'SELECT ''2000-01-01''::timestamptz';
CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS 'SELECT ''2000-01-01''::timestamptz';
CREATE FUNCTION evil.sha256(bytea) RETURNS bytea LANGUAGE sql AS 'SELECT ''\x00''::bytea';
CREATE FUNCTION evil.coalesce(bytea, bytea) RETURNS bytea LANGUAGE sql AS 'SELECT ''\x00''::bytea';
CREATE TABLE evil.idempotent_record (LIKE idempotent_record);

-- records for every path: finished, expired (claimed again; purged),
-- abandoned, a lease that ended (takeover)
BEGIN;
SELECT outcome FROM idem_claim('done', fingerprint => idem_fingerprint('{"a": 1}'));
SELECT idem_finish('done', '{"r": 1}');
SELECT outcome FROM idem_claim('expired');
SELECT idem_finish('expired', '{"r": 2}');
COMMIT;
UPDATE idempotent_record SET expires_at = now() - interval '1 hour' WHERE key = 'expired';
INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
VALUES ('abandoned', 'in_progress', 1, now(), now(), now() + interval '1 day');
INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
SELECT 'old-' || i, 'succeeded', 1, now(), now(), now() - interval '1 hour'
  FROM generate_series(1, 5) i;
INSERT INTO idempotent_record (key, status, fence, recovery_point, locked_until, created_at, updated_at, expires_at)
VALUES ('ended', 'in_progress', 4, 'charged', now() - interval '1 second', now(), now(), now() + interval '1 day');

-- a new backend, so no statement was prepared before the attack
\c
SET search_path = evil, pg_catalog, public;
-- the planted objects do fire for unqualified SQL
SELECT count(*) FROM public.idempotent_record WHERE key = 'done';
:sqlstate
SELECT count(*) AS planted_table_rows FROM idempotent_record;

-- in-transaction claims: replay, IK001, new, expired, abandoned, released
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

-- leased claims: in_progress with a hint, IK001, checkpoint, extend,
-- stale fence, unknown outcome, idem_pending, fenced finish, takeover
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
-- purge: the five old records, in batches of two
SELECT public.idem_purge(2) AS purged;
CALL public.idem_purge_all(2);
SELECT count(*) AS planted_table_rows FROM idempotent_record;
RESET search_path;

SELECT scope, key, status, result, recovery_point, fence, fingerprint,
       locked_until IS NULL AS no_lease, created_at > '2001-01-01' AS real_clock
  FROM idempotent_record ORDER BY scope, key;
SET client_min_messages = warning;
DROP SCHEMA evil CASCADE;
RESET client_min_messages;
TRUNCATE idempotent_record;
