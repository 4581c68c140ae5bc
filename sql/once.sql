-- idem_once: message-consumer deduplication in the caller's transaction
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;
CREATE TABLE once_effects (message_id text, n int);

-- true the first time, false after; the mark commits with the effect
BEGIN;
SELECT idem_once('msg-1', scope => 'billing-consumer') AS first;
INSERT INTO once_effects VALUES ('msg-1', 1);
COMMIT;
BEGIN;
SELECT idem_once('msg-1', scope => 'billing-consumer') AS first;
ROLLBACK;
SELECT idem_once('msg-1', scope => 'billing-consumer') AS first;
-- another consumer (scope) sees the message for the first time
SELECT idem_once('msg-1', scope => 'audit-consumer') AS first;

-- rolled back with the transaction: the redelivery is processed again
BEGIN;
SELECT idem_once('msg-2') AS first;
INSERT INTO once_effects VALUES ('msg-2', 1);
ROLLBACK;
BEGIN;
SELECT idem_once('msg-2') AS first;
INSERT INTO once_effects VALUES ('msg-2', 2);
COMMIT;
SELECT message_id, n FROM once_effects ORDER BY message_id, n;

-- twice in one transaction: the second call is a duplicate
BEGIN;
SELECT idem_once('msg-3') AS first, idem_once('msg-3') AS second;
COMMIT;

-- no commit guard: the mark is an outcome (succeeded), and claims replay it
SELECT scope, key, status, result, fence, expires_at - created_at AS ttl
  FROM idempotent_record WHERE key IN ('msg-1', 'msg-3') ORDER BY scope, key;
SELECT outcome, status FROM idem_claim('msg-3');

-- ttl, and expiry: an expired mark counts as absent (fence + 1)
SELECT idem_once('msg-4', ttl => '7 days') AS first;
SELECT expires_at - created_at AS ttl FROM idempotent_record WHERE key = 'msg-4';
UPDATE idempotent_record SET expires_at = now() - interval '1 second' WHERE key = 'msg-4';
SELECT idem_once('msg-4') AS first;
SELECT status, fence FROM idempotent_record WHERE key = 'msg-4';

-- a key held by a claim is not new
SELECT outcome FROM idem_claim('msg-5', lease => '1 hour');
SELECT idem_once('msg-5') AS first;

-- bad input: 22004 / 22023, nothing written
SELECT idem_once(NULL);
:sqlstate
SELECT idem_once('m', scope => NULL);
:sqlstate
SELECT idem_once('');
:sqlstate
SELECT idem_once(repeat('m', 256));
:sqlstate
SELECT idem_once('m', ttl => '0');
:sqlstate
SELECT count(*) AS records FROM idempotent_record WHERE key = 'm';

DROP TABLE once_effects;
TRUNCATE idempotent_record;
