-- examples/shop.sql — a small shop that places every order exactly once.
--
-- Loaded by scripts/demo.sh (make demo) into a throwaway database.  An HTTP
-- handler would call shop.place_order(key, body) with the request's
-- Idempotency-Key header and its JSON body, in one transaction (autocommit
-- is enough).  The idempotency extension turns a retry, a double click or a
-- concurrent duplicate into a replay of the first answer instead of a second
-- order.  Try it by hand:
--
--     SELECT shop.place_order('ord-1', '{"sku": 7, "qty": 1}');  -- created
--     SELECT shop.place_order('ord-1', '{"sku": 7, "qty": 1}');  -- replay
--     SELECT shop.place_order('ord-1', '{"sku": 7, "qty": 2}');  -- 422

CREATE EXTENSION IF NOT EXISTS idempotency SCHEMA public;
CREATE SCHEMA shop;

-------------------------------------------------------------------------------
-- Business tables
-------------------------------------------------------------------------------

-- Deliberately no UNIQUE (request_key): here preventing a second order is
-- the extension's job, and the demo's report checks that it did it.  (A
-- real shop may add the constraint as well, as a second line of defence.)
CREATE TABLE shop.orders (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_key  text        NOT NULL,
    sku          int         NOT NULL,
    qty          int         NOT NULL CHECK (qty > 0),
    amount_cents bigint      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON shop.orders (request_key);

CREATE TABLE shop.payments (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id     bigint      NOT NULL REFERENCES shop.orders,
    amount_cents bigint      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON shop.payments (order_id);

-- One row per answer given, written in the transaction that gives it, so
-- the answers can be checked against the orders afterwards.
CREATE TABLE shop.request_log (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_key  text        NOT NULL,
    body         jsonb       NOT NULL,
    client       text        NOT NULL,
    wait         boolean     NOT NULL,
    retry_of     bigint      REFERENCES shop.request_log,
    answer       text        NOT NULL
                 CHECK (answer IN ('created', 'replay', 'in_progress', 'rejected')),
    http_status  int         NOT NULL,
    order_id     bigint,     -- no foreign key: the log must be able to hold a wrong id
    logged_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON shop.request_log (request_key);
CREATE INDEX ON shop.request_log (retry_of);

COMMENT ON TABLE shop.orders IS
'one row per order placed; request_key is the idempotency key of the request that placed it';
COMMENT ON TABLE shop.payments IS
'the payment of an order: one per order';
COMMENT ON TABLE shop.request_log IS
'every answer of shop.place_order: request key and body, client, wait flag, retry_of (id of the request this one retries), answer (created, replay, in_progress, rejected), HTTP status and the order id returned';

-------------------------------------------------------------------------------
-- The request handler
-------------------------------------------------------------------------------

CREATE FUNCTION shop.place_order(
    key      text,                      -- the Idempotency-Key header
    body     jsonb,                     -- {"sku": int, "qty": int}
    wait     boolean DEFAULT true,      -- false: answer in_progress at once
    client   text    DEFAULT current_user,  -- for the log only
    retry_of bigint  DEFAULT NULL)      -- request_id of the try this retries
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- every name below is qualified
AS $function$
DECLARE
    unit_price_cents constant bigint := 1250;
    claim        record;   -- the row idem_claim returns
    new_order_id bigint;
    answer       jsonb;    -- what the HTTP handler sends back
    log_id       bigint;
BEGIN
    -- 1. Claim the key for this transaction.  The fingerprint binds the key
    --    to this body: the same key with another body raises IK001.  The
    --    inner block catches only that error (it costs a subtransaction).
    BEGIN
        SELECT * INTO claim
          FROM public.idem_claim(key, scope => 'shop',
                                 fingerprint => public.idem_fingerprint(body),
                                 wait => wait);
    EXCEPTION WHEN SQLSTATE 'IK001' THEN
        answer := jsonb_build_object('answer', 'rejected', 'http_status', 422,
                                     'error', SQLERRM);
    END;

    IF answer IS NULL THEN
        CASE claim.outcome
        WHEN 'claimed' THEN
            -- 2. First request with this key: place the order and its payment.
            INSERT INTO shop.orders (request_key, sku, qty, amount_cents)
            VALUES (key, (body ->> 'sku')::int, (body ->> 'qty')::int,
                    (body ->> 'qty')::int * unit_price_cents)
            RETURNING id INTO new_order_id;
            INSERT INTO shop.payments (order_id, amount_cents)
            SELECT id, amount_cents FROM shop.orders WHERE id = new_order_id;
            -- Stand-in for the rest of the work (stock, pricing, ...): it
            -- keeps the claim open long enough for duplicates to meet it.
            PERFORM pg_sleep(0.02);
            -- 3. Store the answer with the order: both commit or neither.
            answer := jsonb_build_object('http_status', 201, 'order_id', new_order_id);
            PERFORM public.idem_finish(key, answer, scope => 'shop');
            answer := answer || jsonb_build_object('answer', 'created');
        WHEN 'replay' THEN
            -- Done before: answer with the stored result, write nothing.
            answer := claim.result || jsonb_build_object('answer', 'replay');
        WHEN 'in_progress' THEN
            -- Only with wait => false: a duplicate is still running.
            answer := jsonb_build_object('answer', 'in_progress', 'http_status', 409);
        END CASE;
    END IF;

    -- 4. Log the answer in the same transaction.
    INSERT INTO shop.request_log (request_key, body, client, wait, retry_of,
                                  answer, http_status, order_id)
    VALUES (key, body, client, wait, retry_of,
            answer ->> 'answer', (answer ->> 'http_status')::int,
            (answer ->> 'order_id')::bigint)
    RETURNING id INTO log_id;

    RETURN answer || jsonb_build_object('request_id', log_id);
END
$function$;

COMMENT ON FUNCTION shop.place_order(text, jsonb, boolean, text, bigint) IS
'place an order exactly once per idempotency key (scope ''shop''). body: {"sku": int, "qty": int}. Returns jsonb {answer, http_status, order_id, request_id}: created (201, new order and payment), replay (201, the stored first answer, nothing written), in_progress (409, only with wait => false while a duplicate is uncommitted; retry), rejected (422, key already used with a different body: SQLSTATE IK001 caught). Every answer is logged in shop.request_log in the same transaction';
