-- sql/include/try.sql: included (\i) by the regression tests that run a
-- list of calls through one query; not a test of its own.
-- pg_temp.try(sql, check_sql, keep): runs sql (one or more statements) in a
-- subtransaction and answers its SQLSTATE and message, or "ok" and what
-- its last statement returned (or check_sql, run after it).  What a call
-- that succeeded did is rolled back unless keep is true.
CREATE FUNCTION pg_temp.try(sql text, check_sql text DEFAULT NULL, keep boolean DEFAULT false)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    r text;
BEGIN
    BEGIN
        EXECUTE sql INTO r;
        IF check_sql IS NOT NULL THEN
            EXECUTE check_sql INTO r;
        END IF;
        IF keep THEN
            RETURN 'ok ' || coalesce(left(r, 40), 'NULL');
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'ZZ999', MESSAGE = coalesce(r, 'NULL');
    EXCEPTION
        WHEN SQLSTATE 'ZZ999' THEN RETURN 'ok ' || left(SQLERRM, 40);
        WHEN OTHERS THEN RETURN SQLSTATE || ' ' || SQLERRM;
    END;
END $$;
-- pg_temp.try_code(sql): the same, with only the SQLSTATE of an error (for
-- wide matrices whose messages are shown once elsewhere)
CREATE FUNCTION pg_temp.try_code(sql text) RETURNS text LANGUAGE sql AS $$
    SELECT CASE WHEN a LIKE 'ok%' THEN a ELSE left(a, 5) END FROM pg_temp.try(sql) a $$;
-- pg_temp.error_text(sql): runs sql and shows the error it raises as a
-- NOTICE with its SQLSTATE, message, DETAIL and HINT (\set VERBOSITY
-- default shows them); answers whether it raised one.  Nothing is kept.
CREATE FUNCTION pg_temp.error_text(sql text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    d text;
    h text;
BEGIN
    EXECUTE sql;
    RAISE EXCEPTION USING ERRCODE = 'ZZ999', MESSAGE = 'no error';
EXCEPTION
    WHEN SQLSTATE 'ZZ999' THEN RETURN false;
    WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
        RAISE NOTICE USING MESSAGE = SQLSTATE || ' ' || SQLERRM,
                           DETAIL = coalesce(nullif(d, ''), '(none)'), HINT = coalesce(nullif(h, ''), '(none)');
        RETURN true;
END $$;
