-- An outcome recorded by a statement that itself writes the record (or
-- runs inside another write): UPDATE ... RETURNING idem_finish(...), a
-- writable CTE, a trigger on a business table.  The direct path must give
-- the planned SQL's answer in every shape (it used to fail with 55000
-- "attempted to update invisible tuple": the command id was taken before
-- the command counter moved on).  Each shape runs with the direct path on,
-- then off; the lines must be the same.
TRUNCATE idempotent_record;

CREATE TABLE shapes_orders (id int PRIMARY KEY, key text);
CREATE FUNCTION shapes_finish_order() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM idem_finish(NEW.key, jsonb_build_object('order', NEW.id));
    RETURN NEW;
END $$;
CREATE TRIGGER shapes_finish AFTER INSERT ON shapes_orders
    FOR EACH ROW EXECUTE FUNCTION shapes_finish_order();

CREATE FUNCTION shapes_scenario() RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    -- an unknown outcome reconciled in the statement that marks the record
    PERFORM idem_claim('r1', lease => '1 hour');
    PERFORM idem_mark_unknown('r1', '{"timeout": true}', fence => 1);
    UPDATE idempotent_record SET recovery_point = 'reconciled'
     WHERE key = 'r1' AND status = 'unknown'
    RETURNING idem_finish(key, '{"charge": "ch_1"}', scope, fence) INTO r;
    RETURN QUERY SELECT format('update returning: %s %s %s', status, recovery_point, result)
                   FROM idempotent_record WHERE key = 'r1';
    -- the same through a writable CTE
    PERFORM idem_claim('r2', lease => '1 hour');
    WITH marked AS (
        UPDATE idempotent_record SET recovery_point = 'phase 2'
         WHERE key = 'r2' RETURNING key, scope, fence)
    SELECT idem_finish(key, '{"charge": "ch_2"}', scope, fence) INTO r FROM marked;
    RETURN QUERY SELECT format('writable cte: %s %s %s', status, recovery_point, result)
                   FROM idempotent_record WHERE key = 'r2';
    -- a claim and its outcome from a trigger of the business write
    PERFORM idem_claim('r3');
    INSERT INTO shapes_orders VALUES (3, 'r3');
    RETURN QUERY SELECT format('trigger: %s %s', status, result)
                   FROM idempotent_record WHERE key = 'r3';
    -- a claim whose insert is the statement's second write of the key
    PERFORM idem_claim('r4');
    UPDATE idempotent_record SET recovery_point = 'seen' WHERE key = 'r4'
    RETURNING idem_finish(key, '{"n": 4}') INTO r;
    RETURN QUERY SELECT format('claimed, updated, finished: %s %s %s', status, recovery_point, result)
                   FROM idempotent_record WHERE key = 'r4';
    RETURN QUERY SELECT format('replay r4: %s %s', c.outcome, c.result) FROM idem_claim('r4') AS c;
END $$;

SET idempotency.direct_access = on;
SELECT * FROM shapes_scenario();
TRUNCATE idempotent_record, shapes_orders;
SET idempotency.direct_access = off;
SELECT * FROM shapes_scenario();
RESET idempotency.direct_access;

DROP FUNCTION shapes_scenario();
DROP TABLE shapes_orders;
DROP FUNCTION shapes_finish_order();
TRUNCATE idempotent_record;
