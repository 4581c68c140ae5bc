-- sql/include/planted_operator.sql: included (\i) by the regression tests
-- that plant operators in a schema searched before pg_catalog; not a test
-- of its own.
-- pg_temp.plant_operator(schema, op, type): creates schema.trap_TYPE(type,
-- type), which raises 'planted object called', and the operator
-- schema.op (type, type) that calls it.  Answers the operator.
CREATE FUNCTION pg_temp.plant_operator(nsp text, op text, typ text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE FUNCTION %I.%I(%s, %s) RETURNS boolean LANGUAGE plpgsql'
                   ' AS $b$BEGIN RAISE EXCEPTION ''planted object called''; END$b$',
                   nsp, 'trap_' || typ, typ, typ);
    EXECUTE format('CREATE OPERATOR %I.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = %I.%I)',
                   nsp, op, typ, typ, nsp, 'trap_' || typ);
    RETURN format('%s.%s (%s, %s)', nsp, op, typ, typ);
END $$;
