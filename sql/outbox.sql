-- The transactional outbox: idem_outbox_enqueue in the producer's
-- transaction, a relay's claim (lease, fence), mark sent, mark failed
-- (retry, give up), requeue, purge, the two views; bad input; least
-- privilege.  Lease ends are simulated by moving available_at into the
-- past (tests never wait for a lease).  Concurrency is in the isolation
-- specs outbox_*.
\set VERBOSITY terse
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
\i sql/include/try.sql
TRUNCATE idempotency_outbox;
-- the fences of this test start at 1
ALTER SEQUENCE idempotency_outbox_fence_seq RESTART;

-------------------------------------------------------------------------------
-- Enqueue: the message exists exactly when the transaction commits
-------------------------------------------------------------------------------

BEGIN;
SELECT idem_outbox_enqueue('orders', '{"order": 1}', message_id => '00000000-0000-4000-8000-000000000001');
COMMIT;
BEGIN;
SELECT idem_outbox_enqueue('orders', '{"order": 2}', message_id => '00000000-0000-4000-8000-000000000002');
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT idem_outbox_enqueue('orders', '{"order": 3}', message_id => '00000000-0000-4000-8000-000000000003');
ROLLBACK TO SAVEPOINT s;
COMMIT;
-- one message: the rolled-back ones left nothing
SELECT message_id, scope, destination, payload, headers, status, attempts, fence,
       available_at = created_at AS available_at_enqueue, locked_until, sent_at, expires_at, last_error
  FROM idempotency_outbox;

-- without message_id: a new random UUID (version 4, RFC 4122 variant) per
-- call; headers and scope given
SELECT idem_outbox_enqueue('orders', '"plain"', '{"content-language": "en"}', scope => 'shop') AS id \gset
SELECT substr(:'id', 15, 1) AS version, substr(:'id', 20, 1) IN ('8', '9', 'a', 'b') AS rfc4122,
       :'id' <> idem_outbox_enqueue('orders', '[]') AS fresh;
SELECT scope, payload, headers FROM idempotency_outbox WHERE message_id = :'id';
-- a message ID already in the outbox: 23505, whatever its scope
SELECT idem_outbox_enqueue('billing', '{}', message_id => '00000000-0000-4000-8000-000000000001', scope => 'other');
:sqlstate
-- what the relay publishes is what was enqueued: payload and headers as
-- JSON, the message ID fixed
SELECT destination, payload, headers FROM idempotency_outbox ORDER BY created_at, message_id;
TRUNCATE idempotency_outbox;

-------------------------------------------------------------------------------
-- Claim: a batch under one new fence and a lease
-------------------------------------------------------------------------------

SELECT idem_outbox_enqueue('q', format('{"n": %s}', n)::jsonb,
                           message_id => format('00000000-0000-4000-8000-%s', lpad(n::text, 12, '0'))::uuid)
  FROM generate_series(1, 5) AS n;
-- the oldest first, two of them, fence 1, attempts 1, leased for an hour
SELECT message_id, payload, attempts, fence FROM idem_outbox_claim(2, '1 hour');
SELECT message_id, status, fence, attempts, locked_until - clock_timestamp() > '59 minutes' AS leased,
       available_at = locked_until AS claimable_at_lease_end
  FROM idempotency_outbox ORDER BY message_id;
-- the next claim gets the others (fence 2), then nothing while the leases live
SELECT message_id, fence FROM idem_outbox_claim(10, '1 hour');
SELECT count(*) AS claimed FROM idem_outbox_claim(10, '1 hour');
SELECT pending, leased, retried, sent, dead, lag > '0' AS lag FROM idem_outbox_stats;

-------------------------------------------------------------------------------
-- Mark sent: fenced, all or none, repeatable
-------------------------------------------------------------------------------

SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000001,00000000-0000-4000-8000-000000000002}', 1) AS marked;
-- the same mark again (the relay's connection dropped before the answer)
SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000001}', 1) AS marked;
SELECT message_id, status, locked_until, sent_at IS NOT NULL AS sent,
       expires_at - sent_at AS retention
  FROM idempotency_outbox WHERE status = 'sent' ORDER BY message_id;
-- the retention is idempotency.default_ttl when marked
SET idempotency.default_ttl = '2h';
SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000003}', 2) AS marked;
RESET idempotency.default_ttl;
SELECT expires_at - sent_at AS retention FROM idempotency_outbox
 WHERE message_id = '00000000-0000-4000-8000-000000000003';
-- another fence: IK003, and nothing of the list is marked (4 is held
-- under fence 2, 5 too, but the list also names 1 under fence 1)
\set VERBOSITY default
SELECT pg_temp.error_text($$SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000004,00000000-0000-4000-8000-000000000001}', 2)$$);
SELECT pg_temp.error_text($$SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-0000000000ff}', 2)$$);
\set VERBOSITY terse
SELECT status FROM idempotency_outbox WHERE message_id = '00000000-0000-4000-8000-000000000004';
-- an empty list marks nothing
SELECT idem_outbox_mark_sent('{}', 2) AS marked;

-- the lease of 4 and 5 ends; a takeover claims them with fence 3
UPDATE idempotency_outbox SET available_at = now() - interval '1 second' WHERE status = 'pending';
SELECT message_id, attempts, fence FROM idem_outbox_claim(10, '1 hour');
-- the relay whose lease was taken over cannot mark them, sent or failed
SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000004}', 2);
:sqlstate
SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-000000000004', 2, 'timeout');
:sqlstate
-- the new owner can
SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000004}', 3) AS marked;
-- a mark with the current fence is accepted after the lease ended, as
-- long as nobody claimed the message since: the publish did happen
UPDATE idempotency_outbox SET available_at = now() - interval '1 second', locked_until = now() - interval '1 second'
 WHERE message_id = '00000000-0000-4000-8000-000000000005';
SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000005}', 3) AS marked;
SELECT count(*) AS claimable FROM idem_outbox_claim(10, '1 hour');

-------------------------------------------------------------------------------
-- Mark failed: retry after a delay, give up after max_attempts claims
-------------------------------------------------------------------------------

TRUNCATE idempotency_outbox;
SELECT idem_outbox_enqueue('q', '{}', message_id => '00000000-0000-4000-8000-00000000000a');
SELECT fence FROM idem_outbox_claim(1, '1 hour') \gset
SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-00000000000a', :fence, 'connection refused',
                               retry_after => '5 minutes', max_attempts => 2) AS status;
SELECT status, attempts, last_error, locked_until,
       available_at - clock_timestamp() BETWEEN '4 minutes' AND '5 minutes' AS retry_in_5_minutes
  FROM idempotency_outbox;
-- not claimable before its retry time
SELECT count(*) AS claimed FROM idem_outbox_claim(1, '1 hour');
-- the failed claim's fence can no longer mark it, sent or failed
SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-00000000000a}', :fence);
:sqlstate
SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-00000000000a', :fence, 'again');
:sqlstate
UPDATE idempotency_outbox SET available_at = now() - interval '1 second';
SELECT fence, attempts FROM idem_outbox_claim(1, '1 hour') \gset
-- the second claim reached max_attempts: dead, listed, no longer claimed
SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-00000000000a', :fence, 'no route',
                               max_attempts => 2) AS status;
SELECT message_id, destination, attempts, last_error FROM idem_outbox_dead;
SELECT pending, leased, sent, dead, lag FROM idem_outbox_stats;
UPDATE idempotency_outbox SET available_at = now() - interval '1 second';
SELECT count(*) AS claimed FROM idem_outbox_claim(1, '1 hour');
-- a dead message cannot be marked, even by its last fence
SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-00000000000a}', :fence);
:sqlstate
-- requeued by an operator: pending now, attempts 0, last error kept
SELECT idem_outbox_requeue('00000000-0000-4000-8000-00000000000a') AS requeued,
       idem_outbox_requeue('00000000-0000-4000-8000-00000000000a') AS again,
       idem_outbox_requeue('00000000-0000-4000-8000-0000000000ff') AS unknown;
SELECT status, attempts, last_error, available_at <= clock_timestamp() AS claimable FROM idempotency_outbox;
SELECT attempts FROM idem_outbox_claim(1, '1 hour');

-------------------------------------------------------------------------------
-- Purge: idem_purge deletes sent messages past their retention, after the
-- records and tokens, in the same batch; pending and dead ones stay
-------------------------------------------------------------------------------

TRUNCATE idempotency_outbox, idempotent_record, idempotency_token;
SELECT idem_outbox_enqueue('q', to_jsonb(n), message_id => format('00000000-0000-4000-8000-%s', lpad(n::text, 12, '0'))::uuid)
  FROM generate_series(1, 6) AS n;
SELECT max(fence) AS fence, count(*) AS claimed FROM idem_outbox_claim(6, '1 hour') \gset
SELECT :claimed AS claimed;
SELECT idem_outbox_mark_sent(array_agg(message_id), :fence) AS marked FROM idempotency_outbox WHERE payload::int <= 4;
SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-000000000006', :fence, 'x', max_attempts => 1) AS status;
-- three sent ones expired, one not
UPDATE idempotency_outbox SET expires_at = now() - interval '1 second' WHERE payload::int <= 3;
-- a claim's record expired too: purge takes it first
SELECT idem_once('m', ttl => '1 hour');
UPDATE idempotent_record SET expires_at = now() - interval '1 second';
SELECT idem_purge(2) AS purged;
SELECT idem_purge(2) AS purged;
SELECT idem_purge(2) AS purged;
SELECT payload, status FROM idempotency_outbox ORDER BY payload::int;
-- idem_purge_all runs them too
UPDATE idempotency_outbox SET expires_at = now() - interval '1 second' WHERE status = 'sent';
CALL idem_purge_all(1);
SELECT payload, status FROM idempotency_outbox ORDER BY payload::int;

-------------------------------------------------------------------------------
-- Bad input: NULL in each argument, empty destination, headers that are no
-- object, over-long scope, non-positive or too long intervals and counts
-------------------------------------------------------------------------------

TRUNCATE idempotency_outbox;
SELECT idem_outbox_enqueue('q', '{}', message_id => '00000000-0000-4000-8000-000000000001');
SELECT call, pg_temp.try(call) AS answer FROM (VALUES
  ($$SELECT idem_outbox_enqueue(NULL, '{}')$$),
  ($$SELECT idem_outbox_enqueue('q', NULL)$$),
  ($$SELECT idem_outbox_enqueue('q', '{}', NULL, NULL, NULL)$$),
  ($$SELECT idem_outbox_enqueue('q', 'null', NULL, NULL, '') IS NOT NULL$$),
  ($$SELECT idem_outbox_enqueue('', '{}')$$),
  ($$SELECT idem_outbox_enqueue('q', '{}', headers => '[]')$$),
  ($$SELECT idem_outbox_enqueue('q', '{}', headers => '"x"')$$),
  ($$SELECT idem_outbox_enqueue('q', '{}', scope => repeat('s', 256))$$),
  ($$SELECT idem_outbox_enqueue('q', '{}', scope => repeat('s', 255)) IS NOT NULL$$),
  ($$SELECT count(*) FROM idem_outbox_claim(NULL, '1 minute')$$),
  ($$SELECT count(*) FROM idem_outbox_claim(1, NULL)$$),
  ($$SELECT count(*) FROM idem_outbox_claim(0, '1 minute')$$),
  ($$SELECT count(*) FROM idem_outbox_claim(-1, '1 minute')$$),
  ($$SELECT count(*) FROM idem_outbox_claim(1, '0 seconds')$$),
  ($$SELECT count(*) FROM idem_outbox_claim(1, '-1 minute')$$),
  ($$SELECT count(*) FROM idem_outbox_claim(1, '300000 years')$$),
  ($$SELECT idem_outbox_mark_sent(NULL, 1)$$),
  ($$SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000001}', NULL)$$),
  ($$SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000001,NULL}', 1)$$),
  ($$SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000001}', 0)$$),
  ($$SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000001}', -1)$$),
  ($$SELECT idem_outbox_mark_failed(NULL, 1, 'e')$$),
  ($$SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-000000000001', NULL, 'e')$$),
  ($$SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-000000000001', 1, NULL)$$),
  ($$SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-000000000001', 1, 'e', NULL)$$),
  ($$SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-000000000001', 1, 'e', '1 minute', NULL)$$),
  ($$SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-000000000001', 1, 'e', '0 seconds')$$),
  ($$SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-000000000001', 1, 'e', '300000 years')$$),
  ($$SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-000000000001', 1, 'e', max_attempts => 0)$$),
  ($$SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-000000000001', 0, 'e')$$),
  ($$SELECT idem_outbox_requeue(NULL)$$)
) AS c(call);
-- a message never claimed has fence 0, which no claim issues
SELECT fence FROM idempotency_outbox;
-- a read-only transaction: 25006 before anything is read
BEGIN READ ONLY;
SELECT idem_outbox_enqueue('q', '{}');
:sqlstate
ROLLBACK;
SELECT call, pg_temp.try(call) AS answer FROM (VALUES
  ($$SELECT count(*) FROM idem_outbox_claim(1, '1 minute')$$),
  ($$SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000001}', 1)$$),
  ($$SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-000000000001', 1, 'e')$$),
  ($$SELECT idem_outbox_requeue('00000000-0000-4000-8000-000000000001')$$)
) AS c(call), LATERAL (SELECT set_config('transaction_read_only', 'on', true)) AS ro;
-- the messages' table refuses rows the functions never write
SELECT call, pg_temp.try(call) AS answer FROM (VALUES
  ($$INSERT INTO idempotency_outbox (message_id, destination, payload, created_at, available_at) VALUES (gen_random_uuid(), '', '{}', now(), now())$$),
  ($$INSERT INTO idempotency_outbox (message_id, destination, payload, headers, created_at, available_at) VALUES (gen_random_uuid(), 'q', '{}', '[]', now(), now())$$),
  ($$INSERT INTO idempotency_outbox (message_id, destination, payload, status, created_at, available_at) VALUES (gen_random_uuid(), 'q', '{}', 'lost', now(), now())$$)
) AS c(call);

-------------------------------------------------------------------------------
-- Least privilege: an application role enqueues in its granted scopes
-- only; a relay role, granted EXECUTE on the relay's functions, claims and
-- marks every scope; neither can touch the table itself; code attached to
-- the table is refused rather than run as its owner
-------------------------------------------------------------------------------

TRUNCATE idempotency_outbox;
CREATE ROLE regress_ob_owner NOLOGIN;
CREATE ROLE regress_ob_app LOGIN;
CREATE ROLE regress_ob_relay LOGIN;
CREATE ROLE regress_ob_attacker LOGIN;
ALTER TABLE idempotency_outbox OWNER TO regress_ob_owner;
ALTER SEQUENCE idempotency_outbox_fence_seq OWNER TO regress_ob_owner;
INSERT INTO idem_scope_grant VALUES ('regress_ob_app', 'shop:*');
GRANT EXECUTE ON FUNCTION idem_outbox_claim(integer, interval), idem_outbox_mark_sent(uuid[], bigint),
    idem_outbox_mark_failed(uuid, bigint, text, interval, integer) TO regress_ob_relay;
GRANT SELECT ON idem_outbox_stats TO regress_ob_relay;

SET ROLE regress_ob_app;
SELECT idem_outbox_enqueue('q', '{"n": 1}', message_id => '00000000-0000-4000-8000-000000000001', scope => 'shop:eu');
SELECT call, pg_temp.try(call) AS answer FROM (VALUES
  ($$SELECT idem_outbox_enqueue('q', '{}', scope => 'tenant_b')$$),
  ($$SELECT idem_outbox_enqueue('q', '{}')$$),
  ($$SELECT count(*) FROM idem_outbox_claim(10, '1 minute')$$),
  ($$SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000001}', 1)$$),
  ($$SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-000000000001', 1, 'e')$$),
  ($$SELECT idem_outbox_requeue('00000000-0000-4000-8000-000000000001')$$),
  ($$SELECT count(*) FROM idempotency_outbox$$),
  ($$SELECT count(*) FROM idem_outbox_dead$$),
  ($$SELECT count(*) FROM idem_outbox_stats$$),
  ($$INSERT INTO idempotency_outbox (message_id, scope, destination, payload, created_at, available_at) VALUES (gen_random_uuid(), 'tenant_b', 'q', '{}', now(), now())$$),
  ($$UPDATE idempotency_outbox SET status = 'sent'$$),
  ($$DELETE FROM idempotency_outbox$$),
  ($$SELECT nextval('idempotency_outbox_fence_seq')$$)
) AS c(call);
RESET ROLE;

SET ROLE regress_ob_relay;
SELECT message_id, scope, fence AS relay_fence FROM idem_outbox_claim(10, '1 hour') \gset
SELECT :'message_id' AS message_id, :'scope' AS scope;
SELECT idem_outbox_mark_sent(ARRAY[:'message_id']::uuid[], :relay_fence) AS marked;
SELECT pending, sent FROM idem_outbox_stats;
SELECT call, pg_temp.try(call) AS answer FROM (VALUES
  ($$SELECT idem_outbox_enqueue('q', '{}', scope => 'shop:eu')$$),
  ($$SELECT count(*) FROM idempotency_outbox$$),
  ($$UPDATE idempotency_outbox SET fence = 99$$)
) AS c(call);
RESET ROLE;

-- a role holding the TRIGGER privilege attaches a trigger whose function
-- would make it a superuser if it ran as the owner (or anyone privileged)
GRANT TRIGGER ON idempotency_outbox TO regress_ob_attacker;
GRANT CREATE ON SCHEMA public TO regress_ob_attacker;
SET ROLE regress_ob_attacker;
CREATE FUNCTION public.ob_escalate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'attacker code ran as %', current_user;
    EXECUTE 'ALTER ROLE regress_ob_attacker SUPERUSER';
    RETURN NEW;
END $$;
CREATE TRIGGER ob_escalate BEFORE INSERT OR UPDATE ON idempotency_outbox
    FOR EACH ROW EXECUTE FUNCTION public.ob_escalate();
RESET ROLE;
-- the application's enqueue and the relay's calls are refused (55000), and
-- the attacker's code never runs
SET ROLE regress_ob_app;
SELECT idem_outbox_enqueue('q', '{}', scope => 'shop:eu');
:sqlstate
RESET ROLE;
SET ROLE regress_ob_relay;
SELECT count(*) FROM idem_outbox_claim(10, '1 hour');
:sqlstate
SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000001}', 1);
:sqlstate
RESET ROLE;
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_ob_attacker';
DROP TRIGGER ob_escalate ON idempotency_outbox;
DROP FUNCTION public.ob_escalate();
REVOKE CREATE ON SCHEMA public FROM regress_ob_attacker;

-- a role with privileges on the table works as itself (invoker mode):
-- scope grants do not matter, the fence sequence needs USAGE
GRANT SELECT, INSERT, UPDATE ON idempotency_outbox TO regress_ob_attacker;
SET ROLE regress_ob_attacker;
SELECT idem_outbox_enqueue('q', '{}', message_id => '00000000-0000-4000-8000-000000000002', scope => 'anything');
RESET ROLE;
GRANT EXECUTE ON FUNCTION idem_outbox_claim(integer, interval) TO regress_ob_attacker;
SET ROLE regress_ob_attacker;
SELECT count(*) FROM idem_outbox_claim(10, '1 hour');
:sqlstate
RESET ROLE;
GRANT USAGE ON SEQUENCE idempotency_outbox_fence_seq TO regress_ob_attacker;
SET ROLE regress_ob_attacker;
SELECT message_id, scope FROM idem_outbox_claim(10, '1 hour');
RESET ROLE;

-- the messages as the owner sees them: nothing forged
SELECT message_id, scope, status, fence = :relay_fence AS relay_fence FROM idempotency_outbox ORDER BY message_id;

-- clean up
ALTER TABLE idempotency_outbox OWNER TO CURRENT_USER;
ALTER SEQUENCE idempotency_outbox_fence_seq OWNER TO CURRENT_USER;
TRUNCATE idempotency_outbox, idem_scope_grant;
REVOKE SELECT ON idem_outbox_stats FROM regress_ob_relay;
DROP OWNED BY regress_ob_relay, regress_ob_attacker;
DROP ROLE regress_ob_owner, regress_ob_app, regress_ob_relay, regress_ob_attacker;
