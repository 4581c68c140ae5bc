-- Bad input: a clear error with its SQLSTATE, and nothing changes
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;
BEGIN;
SELECT outcome FROM idem_claim('held');
SELECT idem_finish('held', '{"kept": true}');
COMMIT;

-- NULL arguments: 22004 (no function is STRICT)
SELECT * FROM idem_claim(NULL);
:sqlstate
SELECT * FROM idem_claim('k', scope => NULL);
:sqlstate
SELECT * FROM idem_claim('k', wait => NULL);
:sqlstate
SELECT idem_finish(NULL, '{}');
:sqlstate
SELECT idem_finish('held', NULL);
:sqlstate
SELECT idem_finish('held', '{}', scope => NULL);
:sqlstate
SELECT idem_fail(NULL, '{}');
:sqlstate
SELECT idem_fail('held', NULL);
:sqlstate
SELECT idem_fail('held', '{}', retryable => NULL);
:sqlstate
SELECT idem_fail('held', '{}', scope => NULL);
:sqlstate
SELECT * FROM idem_lookup(NULL);
:sqlstate
SELECT * FROM idem_lookup('held', NULL);
:sqlstate
SELECT proname FROM pg_proc WHERE proname LIKE 'idem\_%' AND proisstrict;

-- a NULL fingerprint is allowed (no check); a NULL ttl means the default
BEGIN;
SELECT outcome FROM idem_claim('nulls-ok', fingerprint => NULL, ttl => NULL);
SELECT idem_finish('nulls-ok', '{}');
COMMIT;

-- keys: empty → 22023; up to idempotency.max_key_length characters
SELECT * FROM idem_claim('');
:sqlstate
SHOW idempotency.max_key_length;
BEGIN;
SELECT outcome FROM idem_claim(repeat('k', 255));
SELECT outcome FROM idem_claim(repeat('é', 255));
SELECT outcome FROM idem_claim('key', scope => repeat('s', 255));
ROLLBACK;
SELECT outcome FROM idem_claim(repeat('k', 256));
:sqlstate
SELECT outcome FROM idem_claim(repeat('é', 256));
:sqlstate
SELECT outcome FROM idem_claim('key', scope => repeat('s', 256));
:sqlstate
SET idempotency.max_key_length = 8;
SELECT outcome FROM idem_claim('123456789');
:sqlstate
RESET idempotency.max_key_length;
SET idempotency.max_key_length = 0;
SET idempotency.max_key_length = 2000;
-- the key is kept exactly as sent: white space and case are significant
BEGIN;
SELECT outcome FROM idem_claim(' held');
SELECT outcome FROM idem_claim('HELD');
SELECT outcome FROM idem_claim('held ');
ROLLBACK;

-- ttl must be positive: 22023
SELECT outcome FROM idem_claim('k', ttl => '0');
:sqlstate
SELECT outcome FROM idem_claim('k', ttl => '-1 second');
:sqlstate
SELECT outcome FROM idem_claim('k', ttl => '1 month -31 days');
:sqlstate
-- zero as a fixed duration (a month is 30 days, a year 365.25 days, as
-- extract(epoch FROM ttl) counts them), whatever the calendar says
SELECT outcome FROM idem_claim('k', ttl => '1 month -30 days');
:sqlstate
SELECT outcome FROM idem_claim('k', ttl => '1 year -365 days -6 hours');
:sqlstate
-- server time + ttl past the timestamp range: 22008
SELECT outcome FROM idem_claim('k', ttl => '300000 years');
:sqlstate
-- (the message's unit text differs between PostgreSQL majors: the code,
-- and the range from pg_settings)
\set VERBOSITY sqlstate
SET idempotency.default_ttl = 0;
\set VERBOSITY default
SELECT min_val, max_val, unit FROM pg_settings WHERE name = 'idempotency.default_ttl';

-- nothing above changed the table
SELECT key, status, result, fence FROM idempotent_record ORDER BY key;
TRUNCATE idempotent_record;
