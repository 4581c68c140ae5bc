-- A read-only transaction (every transaction of a hot standby is one):
-- each function that may write refuses with 25006 before it reads
-- anything, so the answer does not depend on what the records hold;
-- reads keep working.  test/t/017_standby_refuses_writes.pl does the same
-- on a standby.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record, idempotency_token;
BEGIN;
SELECT outcome FROM idem_claim('finished');
SELECT idem_finish('finished', '{"done": true}');
COMMIT;
SELECT outcome, fence FROM idem_claim('leased', lease => '1 hour');
SELECT idem_once('seen') AS first;
SELECT idem_token_issue('form') AS token \gset
CREATE TABLE read_only_orders (id int PRIMARY KEY, status text);
INSERT INTO read_only_orders VALUES (1, 'pending');

\i sql/include/try.sql
\set VERBOSITY terse
BEGIN READ ONLY;
-- a finished key, a seen id: refused as a new one would be
SELECT outcome FROM idem_claim('finished');
:sqlstate
ROLLBACK;
SET default_transaction_read_only = on;
SELECT outcome FROM idem_claim('finished');
:sqlstate
-- every function that may write (pg_temp.try answers SQLSTATE and message)
SELECT c AS call, pg_temp.try(replace(c, ':token', quote_literal(:'token')), keep => true) AS refused FROM (VALUES
    ($$SELECT outcome FROM idem_claim('new', wait => false)$$), ($$SELECT idem_once('seen')$$), ($$SELECT idem_once('unseen')$$),
    ($$SELECT idem_finish('leased', '{}', fence => 1)$$), ($$SELECT idem_fail('leased', '{}', fence => 1)$$),
    ($$SELECT idem_mark_unknown('leased', '{}', fence => 1)$$), ($$SELECT idem_checkpoint('leased', 'charged', fence => 1)$$),
    ($$SELECT idem_extend_lease('leased', '1 minute', fence => 1)$$), ($$SELECT idem_purge(10)$$), ($$SELECT idem_token_issue('form')$$),
    ($$SELECT idem_token_consume(:token, 'form')$$),
    ($$SELECT idem_transition('read_only_orders', 1, 'paid', ARRAY['pending'])$$)) AS v(c);
\set VERBOSITY default
-- the message
SELECT idem_once('seen');
-- reads work
SELECT key, status, fence FROM idem_lookup('finished');
SELECT count(*) AS pending FROM idem_pending;
SELECT length(idem_fingerprint('{}')) AS fingerprint_bytes;
RESET default_transaction_read_only;

-- nothing changed
SELECT key, status, fence, recovery_point FROM idempotent_record ORDER BY key;
SELECT count(*) AS tokens, count(consumed_at) AS consumed FROM idempotency_token;
SELECT status FROM read_only_orders;
DROP TABLE read_only_orders;
TRUNCATE idempotent_record, idempotency_token;
