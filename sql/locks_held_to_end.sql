-- An index a call searched stays locked to the end of the transaction, as
-- the executor keeps the lock of an index scan, whichever path serves the
-- call (the direct path used to release its index locks at once, so a DROP
-- INDEX or REINDEX could run between two calls of one transaction).
TRUNCATE idempotent_record;
SELECT idem_once('held');

CREATE FUNCTION index_locked(index regclass) RETURNS boolean
LANGUAGE sql AS $$
    SELECT count(*) > 0 FROM pg_locks AS l
     WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation'
       AND l.relation = index
$$;

SET idempotency.direct_access = on;
BEGIN;
SELECT outcome FROM idem_claim('held');
SELECT index_locked('idempotent_record_pkey') AS replay_keeps_primary_key;
COMMIT;
SELECT outcome FROM idem_claim('open', lease => '1 hour');
BEGIN;
SELECT idem_finish('open', '{}', fence => 1);
SELECT index_locked('idempotent_record_pkey') AS finish_keeps_primary_key;
COMMIT;
BEGIN;
SELECT idem_purge(10);
SELECT index_locked('idempotent_record_expires_at_idx') AS purge_keeps_expires_at;
COMMIT;

SET idempotency.direct_access = off;
BEGIN;
SELECT outcome FROM idem_claim('held');
SELECT index_locked('idempotent_record_pkey') AS replay_keeps_primary_key;
COMMIT;
SELECT outcome FROM idem_claim('open2', lease => '1 hour');
BEGIN;
SELECT idem_finish('open2', '{}', fence => 1);
SELECT index_locked('idempotent_record_pkey') AS finish_keeps_primary_key;
COMMIT;
BEGIN;
SELECT idem_purge(10);
SELECT index_locked('idempotent_record_expires_at_idx') AS purge_keeps_expires_at;
COMMIT;
RESET idempotency.direct_access;

DROP FUNCTION index_locked(regclass);
TRUNCATE idempotent_record;
