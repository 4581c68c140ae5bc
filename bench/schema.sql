-- bench/schema.sql — objects of `make bench` (scripts/bench.sh), created in
-- a database of its own on a throwaway cluster.
--
-- The bench_* helper functions are STABLE (no stricter: their bodies call
-- stable functions such as convert_to and jsonb_build_object), so that the
-- planner inlines them into the statements; IMMUTABLE would make it run
-- each through the SQL-function executor instead, a cost both sides would
-- pay and that would hide the difference between them.
--
-- bench_order is the business table: one row per business effect, written
-- only by the request that claimed its key.  hand_record is the table of the
-- hand-written baseline: the usual idempotency-key table of an application
-- that does the INSERT ... ON CONFLICT DO NOTHING RETURNING / SELECT on
-- conflict / UPDATE dance itself (no fencing, no lease, status as text).

CREATE EXTENSION idempotency;

CREATE TABLE bench_order (
    id         bigserial   PRIMARY KEY,
    run        text        NOT NULL,        -- which benchmark run wrote it
    key        text        NOT NULL,        -- idempotency key of the request
    sku        int         NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE hand_record (
    scope       text        NOT NULL DEFAULT '',
    key         text        NOT NULL,
    status      text        NOT NULL,       -- in_progress | succeeded | failed
    fingerprint bytea,
    result      jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);

-- B11's hand-written reference (B9's hand-record): the least record a
-- hand-written middleware keeps, the key and request, then the response
CREATE TABLE bench_hand_request (
    key      text PRIMARY KEY,
    request  text,
    status   int,
    response text
);

-- The ~100-byte result both sides store for order id and sku
CREATE FUNCTION bench_result(order_id bigint, sku int) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
RETURN jsonb_build_object('order_id', order_id, 'status', 'created',
                          'sku', sku, 'amount_cents', 1999,
                          'currency', 'EUR', 'carrier', 'standard');

-- The request fingerprint both sides pass: SHA-256 of the request body, as
-- an application computes it (idem_fingerprint would canonicalise jsonb
-- first; the bench keeps the work on both sides identical)
CREATE FUNCTION bench_fingerprint(sku int) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE
RETURN sha256(convert_to('{"sku": ' || sku || '}', 'UTF8'));

-- B2: keys 0 .. n-1, finished, in both tables
CREATE PROCEDURE bench_load_replay_keys(n int)
LANGUAGE sql
BEGIN ATOMIC
    INSERT INTO idempotent_record (scope, key, status, fingerprint, result,
                                   fence, created_at, updated_at, expires_at)
    SELECT 'bench', md5('b2-' || i)::uuid::text, 'succeeded',
           bench_fingerprint(i), bench_result(i, i), 1,
           now(), now(), now() + interval '1 day'
      FROM generate_series(0, n - 1) AS i;
    INSERT INTO hand_record (scope, key, status, fingerprint, result,
                             created_at, updated_at, expires_at)
    SELECT 'bench', md5('b2-' || i)::uuid::text, 'succeeded',
           bench_fingerprint(i), bench_result(i, i),
           now(), now(), now() + interval '1 day'
      FROM generate_series(0, n - 1) AS i;
END;

-- A fresh UUID-shaped key per (run, client, request number): the random
-- order in which clients' Idempotency-Key headers arrive
CREATE FUNCTION bench_key(run text, client int, n int) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN md5(run || '-' || client || '-' || n)::uuid::text;

-- A hot key: one of k keys per 50 ms time slot, so concurrent clients
-- collide on fresh keys while they are being claimed
CREATE FUNCTION bench_hot_key(run text, k int) RETURNS text
LANGUAGE sql VOLATILE
RETURN run || '-' || floor(extract(epoch FROM clock_timestamp()) * 20)::bigint || '-' || k;

-- One Redis command in RESP, for redis-cli --pipe: psql -At ends each row
-- with \n, so the text ends with the \r before it
CREATE FUNCTION bench_resp(VARIADIC args text[]) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN '*' || cardinality(args) || E'\r\n'
       || (SELECT string_agg('$' || octet_length(a) || E'\r\n' || a, E'\r\n')
             FROM unnest(args) AS a)
       || E'\r';

-- B7: the README's pattern, one statement in autocommit: the claim, the
-- business insert and idem_finish in one transaction; 'replay' for a
-- finished key, 'busy' (HTTP 409) for one in progress
CREATE FUNCTION bench_place_order(run text, scope text, key text, body jsonb)
RETURNS text LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    c        idem_claim_result;
    order_id bigint;
BEGIN
    c := idem_claim(key, scope => scope, fingerprint => idem_fingerprint(body));
    IF c.outcome = 'replay' THEN
        RETURN 'replay';
    ELSIF c.outcome = 'in_progress' THEN
        RETURN 'busy';
    END IF;
    INSERT INTO bench_order (run, key, sku) VALUES (run, key, (body ->> 'sku')::int)
    RETURNING id INTO order_id;
    PERFORM idem_finish(key, jsonb_build_object('order_id', order_id), scope => scope);
    RETURN 'done';
END $$;
