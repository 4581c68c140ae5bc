-- sql/include/kept_until.sql: included (\i) by the regression tests that
-- read a record's retention; not a test of its own (REGRESS is sql/*.sql).
-- until when a record answers duplicates: expires_at, and a final outcome
-- at least its retention (expires_at - created_at) after updated_at
CREATE FUNCTION pg_temp.kept_until(r idempotent_record) RETURNS timestamptz
LANGUAGE sql AS $$
    SELECT CASE WHEN r.status NOT IN ('succeeded', 'failed') THEN r.expires_at
                WHEN r.expires_at - r.created_at < '294276-12-31 23:59:59.999999+00'::timestamptz - r.updated_at
                THEN greatest(r.expires_at, timezone('UTC', timezone('UTC', r.updated_at) + (r.expires_at - r.created_at)))
                ELSE '294276-12-31 23:59:59.999999+00' END $$;
