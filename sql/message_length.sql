-- Values a caller supplies (keys, scopes, states) appear in messages,
-- details and hints shortened to 100 characters and "...", however long
-- they are: the SQLSTATE and the meaning stay, the server log stays
-- bounded.
\i sql/include/try.sql
TRUNCATE idempotent_record, idem_scope_grant;
-- keys and scopes of up to 1,024 characters (the setting's maximum)
SET idempotency.max_key_length = 1024;

-- a state of 100,000 characters against a transition guard (IK005)
CREATE TABLE regress_ml_orders (id text PRIMARY KEY, status text NOT NULL);
CREATE TRIGGER regress_ml_status BEFORE UPDATE ON regress_ml_orders FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'pending>paid');
INSERT INTO regress_ml_orders VALUES ('1', 'pending');
SELECT pg_temp.error_text($$SELECT idem_transition('regress_ml_orders', '1'::text, repeat('p', 100000), '{pending}')$$);
SELECT pg_temp.error_text($$UPDATE regress_ml_orders SET status = repeat('é', 100000)$$);

-- a long key and scope: reused with another fingerprint (IK001), finished
-- without a claim (IK002), left without an outcome at commit (IK004); a
-- fingerprint of 64 bytes
BEGIN;
SELECT outcome FROM idem_claim(repeat('k', 1024), scope => repeat('s', 1024), fingerprint => '\x01');
SELECT idem_finish(repeat('k', 1024), '{}', scope => repeat('s', 1024));
COMMIT;
SELECT pg_temp.error_text(format('SELECT idem_claim(%L, scope => %L, fingerprint => %L)',
                                 repeat('k', 1024), repeat('s', 1024), '\x' || repeat('ab', 64)));
SELECT pg_temp.error_text(format('SELECT idem_finish(%L, %L, scope => %L)',
                                 repeat('x', 1024), '{}', repeat('s', 1024)));
BEGIN;
SELECT outcome FROM idem_claim(repeat('u', 1024));
COMMIT;

-- a scope a role was not granted (42501)
CREATE ROLE regress_ml_app;
SET ROLE regress_ml_app;
SELECT pg_temp.error_text(format('SELECT idem_claim(%L, scope => %L)', 'k', repeat('t', 1024)));
RESET ROLE;

-- clean up
DROP ROLE regress_ml_app;
DROP TABLE regress_ml_orders;
TRUNCATE idempotent_record;
