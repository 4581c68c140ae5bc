-- An index a call searched stays locked to the end of the transaction, as
-- the executor keeps the lock of an index scan, whichever path serves the
-- call (the direct path used to release its index locks at once, so a DROP
-- INDEX or REINDEX could run between two calls of one transaction).  Each
-- call runs in a transaction of its own (the procedure commits after each),
-- so a lock seen was taken by that call.
TRUNCATE idempotent_record;
SELECT idem_once('held');

CREATE TABLE lock_checks (path text, call text, index regclass, held boolean);

CREATE PROCEDURE check_locks(direct boolean)
LANGUAGE plpgsql AS $$
DECLARE
    path text := CASE WHEN direct THEN 'direct' ELSE 'sql' END;
    k    text := 'open-' || path;
BEGIN
    PERFORM set_config('idempotency.direct_access', direct::text, false);
    PERFORM idem_claim(k, lease => '1 hour');
    COMMIT;
    PERFORM idem_claim('held');
    INSERT INTO lock_checks SELECT path, 'replay', 'idempotent_record_pkey', index_locked('idempotent_record_pkey');
    COMMIT;
    PERFORM idem_finish(k, '{}', fence => 1);
    INSERT INTO lock_checks SELECT path, 'finish', 'idempotent_record_pkey', index_locked('idempotent_record_pkey');
    COMMIT;
    PERFORM idem_purge(10);
    INSERT INTO lock_checks SELECT path, 'purge', 'idempotent_record_expires_at_idx', index_locked('idempotent_record_expires_at_idx');
    COMMIT;
    RESET idempotency.direct_access;
END $$;

CREATE FUNCTION index_locked(index regclass) RETURNS boolean
LANGUAGE sql AS $$
    SELECT count(*) > 0 FROM pg_locks AS l
     WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation'
       AND l.relation = index
$$;

CALL check_locks(true);
CALL check_locks(false);
SELECT * FROM lock_checks ORDER BY call, path;

DROP PROCEDURE check_locks(boolean);
DROP FUNCTION index_locked(regclass);
DROP TABLE lock_checks;
TRUNCATE idempotent_record;
