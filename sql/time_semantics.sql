-- Time (docs/concepts.md "Time"): a ttl or lease is a fixed duration, the seconds
-- extract(epoch FROM it) gives (a day is 24 hours, a month 30 days, a year
-- 365.25 days), added to the server clock.  Stored times and lengths, and
-- the retention an outcome restarts, are the same whatever the session's
-- TimeZone, DateStyle or IntervalStyle; a ttl or lease too long for the
-- timestamp range is refused (22008), and every accepted claim can be
-- finished.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record, idempotency_token;

-------------------------------------------------------------------------------
-- A daylight saving change within the next day of the session's TimeZone
-------------------------------------------------------------------------------
-- a POSIX zone (UTC+0 in winter) whose summer time starts at the full
-- hour 11 to 12 hours from now (day of the year, zero-based with leap days
-- counted, and hour) and ends two days later: a calendar day from now
-- lasts 23 hours there, whatever the date and the time of day.  (Not at a
-- calendar midnight: in the hour after one, now + 1 day would fall in the
-- hour the change skips, which counts as winter time, and last 24 hours.)
SELECT format('TST0TDT,%s/%s,%s/%s',
              extract(doy FROM t)::int - 1, extract(hour FROM t),
              extract(doy FROM t + interval '2 days')::int - 1, extract(hour FROM t)) AS zone
  FROM (SELECT date_trunc('hour', now() AT TIME ZONE 'UTC') + interval '12 hours' AS t) AS change \gset
SET TimeZone = :'zone';
SELECT now() + interval '1 day' - now() AS calendar_day_here;

SELECT outcome FROM idem_claim('day', ttl => '1 day', lease => '1 minute');
SELECT outcome FROM idem_claim('leased-day', lease => '1 day');
SELECT idem_once('once-day', ttl => '1 day') AS first;
SELECT idem_token_issue('day', ttl => '1 day') IS NOT NULL AS issued;
SELECT key, expires_at - created_at AS ttl, locked_until - created_at AS lease
  FROM idempotent_record ORDER BY key;
SELECT expires_at - created_at AS token_ttl FROM idempotency_token;
SELECT idem_extend_lease('leased-day', '1 day', fence => 1) - clock_timestamp()
       BETWEEN interval '23 hours 59 minutes' AND interval '1 day' AS extended_a_full_day;

-- the retention an outcome restarts is the same 24 hours
SELECT idem_finish('leased-day', '{}', fence => 1);
\i sql/include/kept_until.sql
SELECT pg_temp.kept_until(idempotent_record) - updated_at AS kept_after_outcome
  FROM idempotent_record WHERE key = 'leased-day';
BEGIN;
SELECT outcome FROM idem_claim('day-2', ttl => '1 day');
SELECT pg_sleep(0.01);	-- the outcome's time is later than the claim's
SELECT idem_finish('day-2', '{}');
COMMIT;
SELECT pg_temp.kept_until(idempotent_record) - updated_at AS kept_after_outcome, pg_temp.kept_until(idempotent_record) > created_at + interval '24 hours' AS restarted
  FROM idempotent_record WHERE key = 'day-2';
-- ... the same through the planned SQL
SET idempotency.direct_access = off;
BEGIN;
SELECT outcome FROM idem_claim('day-3', ttl => '1 day');
SELECT pg_sleep(0.01);
SELECT idem_finish('day-3', '{}');
COMMIT;
RESET idempotency.direct_access;
SELECT pg_temp.kept_until(idempotent_record) - updated_at AS kept_after_outcome, pg_temp.kept_until(idempotent_record) > created_at + interval '24 hours' AS restarted
  FROM idempotent_record WHERE key = 'day-3';
RESET TimeZone;

-------------------------------------------------------------------------------
-- Months and years are 30 and 365.25 days; the session's styles change
-- nothing
-------------------------------------------------------------------------------
CREATE TEMP TABLE lengths (style text, key text, seconds numeric);
CREATE FUNCTION claim_lengths(style text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM idem_claim(style || '-month', ttl => '1 month', lease => '1 mon');
    PERFORM idem_claim(style || '-year', ttl => '1 year', lease => '1 mon');
    PERFORM idem_claim(style || '-mixed', ttl => '1 year 13 months -2 days 3 hours', lease => '1 mon');
    INSERT INTO lengths
    SELECT style, substr(key, length(style) + 2),
           extract(epoch FROM expires_at - created_at)
      FROM idempotent_record WHERE key LIKE style || '-%';
    INSERT INTO lengths
    SELECT style, 'month lease', extract(epoch FROM locked_until - created_at)
      FROM idempotent_record WHERE key = style || '-month';
END $$;
SET TimeZone = 'America/New_York';
SELECT claim_lengths('new_york');
SET TimeZone = 'Asia/Kathmandu';
SET DateStyle = 'SQL, DMY';
SET IntervalStyle = 'sql_standard';
SELECT claim_lengths('kathmandu_sql');
SET TimeZone = 'Australia/Lord_Howe';
SET DateStyle = 'German';
SET IntervalStyle = 'iso_8601';
SELECT claim_lengths('lord_howe_iso');
RESET TimeZone;
RESET DateStyle;
RESET IntervalStyle;
SELECT key, count(DISTINCT seconds) AS lengths, min(seconds) AS seconds,
       min(seconds) = extract(epoch FROM CASE key WHEN 'month' THEN interval '30 days'
                                                  WHEN 'month lease' THEN interval '30 days'
                                                  WHEN 'year' THEN interval '365.25 days'
                                                  ELSE interval '1 year 13 months -2 days 3 hours' END) AS as_epoch
  FROM lengths GROUP BY key ORDER BY key;
DROP FUNCTION claim_lengths(text);
TRUNCATE idempotent_record, idempotency_token;

-------------------------------------------------------------------------------
-- The largest ttl and lease: refused when server time + it is past the
-- timestamp range (22008), and an accepted one can always be finished
-------------------------------------------------------------------------------
SELECT '294276-12-31 23:59:59.999999+00'::timestamptz AS last \gset
-- too long, for every function that takes one
SELECT outcome FROM idem_claim('too-long', ttl => '300000 years');
:sqlstate
SELECT outcome FROM idem_claim('too-long', lease => '300000 years');
:sqlstate
SELECT idem_once('too-long', ttl => '300000 years');
:sqlstate
SELECT idem_token_issue('too-long', ttl => '300000 years');
:sqlstate
SELECT count(*) AS written FROM idempotent_record;

-- ttl and lease that end an hour before the range does, measured when the
-- argument is computed (the call reads the clock a little later, well
-- within the hour even on a busy machine)
CREATE FUNCTION longest() RETURNS interval LANGUAGE sql AS
$$SELECT '294276-12-31 23:59:59.999999+00'::timestamptz - clock_timestamp() - interval '1 hour'$$;
-- the claim of KEY made two hours ago: its outcome, recorded now, comes
-- more than that hour after it, so outcome time + ttl is past the range
CREATE FUNCTION claimed_two_hours_ago(k text) RETURNS void LANGUAGE sql AS
$$UPDATE idempotent_record SET created_at = created_at - interval '2 hours',
                               updated_at = updated_at - interval '2 hours' WHERE key = k$$;
BEGIN;
SELECT outcome FROM idem_claim('longest', ttl => longest());
SELECT claimed_two_hours_ago('longest');
SELECT idem_finish('longest', '{}');
COMMIT;
SELECT outcome FROM idem_claim('longest-lease', ttl => longest(), lease => longest());
SELECT claimed_two_hours_ago('longest-lease');
SELECT idem_extend_lease('longest-lease', '300000 years', fence => 1);
:sqlstate
SELECT idem_extend_lease('longest-lease', longest(), fence => 1) <= :'last' AS extended;
SELECT idem_checkpoint('longest-lease', 'charged', fence => 1);
SELECT idem_finish('longest-lease', '{}', fence => 1);
SELECT idem_once('longest-once', ttl => longest()) AS first;
SELECT idem_token_consume(idem_token_issue('longest', ttl => longest()), 'longest') AS consumed;
-- a takeover with the longest ttl of a claim made a day ago: its
-- retention (expires_at - created_at) is now longer than the range left
INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
VALUES ('abandoned', 'in_progress', 1, now() - interval '1 day', now() - interval '1 day', now() + interval '1 hour');
SELECT outcome, fence FROM idem_claim('abandoned', ttl => longest(), lease => '1 minute');
SELECT idem_mark_unknown('abandoned', '{}', fence => 2);
SELECT idem_finish('abandoned', '{}', fence => 2);
SELECT key, status, pg_temp.kept_until(idempotent_record) = :'last' AS kept_to_the_last_instant
  FROM idempotent_record ORDER BY key;
-- ... and through the planned SQL
INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
VALUES ('abandoned-sql', 'in_progress', 1, now() - interval '1 day', now() - interval '1 day', now() + interval '1 hour');
SET idempotency.direct_access = off;
SELECT outcome, fence FROM idem_claim('abandoned-sql', ttl => longest(), lease => '1 minute');
SELECT idem_finish('abandoned-sql', '{}', fence => 2);
RESET idempotency.direct_access;
SELECT status, pg_temp.kept_until(idempotent_record) = :'last' AS kept_to_the_last_instant
  FROM idempotent_record WHERE key = 'abandoned-sql';
DROP FUNCTION longest();
DROP FUNCTION claimed_two_hours_ago(text);
TRUNCATE idempotent_record, idempotency_token;
