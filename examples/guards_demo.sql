-- examples/guards_demo.sql — make demo, third act: state machines and
-- single-use tokens, on the shop that the load has just filled.
--
-- Every order gets a shipment whose status may only move along
-- packing>shipped>delivered or packing>cancelled (idem_transition_guard).
-- A "ship order" message is delivered twice: the first delivery moves the
-- shipment (applied), the redelivery finds it already there (already) and
-- writes nothing.  Cancelling the shipped order is rejected, and an UPDATE
-- that tries to move it back is refused with IK005.  A checkout form token
-- is submitted twice: the second submit is refused.
--
-- Run by scripts/demo.sh after the report, with psql -v ON_ERROR_STOP=1: the
-- last statement raises an error, and so fails the demo, unless every step
-- answered as documented; scripts/demo.sh then counts the act as failed.

\set ON_ERROR_STOP 1
\pset format unaligned
\pset tuples_only on

-------------------------------------------------------------------------------
-- Shipments with a guarded status
-------------------------------------------------------------------------------
CREATE TABLE shop.shipments (
    order_id bigint PRIMARY KEY REFERENCES shop.orders,
    status   text   NOT NULL DEFAULT 'packing'
);
CREATE TRIGGER shipments_status_guard
    AFTER INSERT OR UPDATE ON shop.shipments FOR EACH ROW
    EXECUTE FUNCTION public.idem_transition_guard('status', '>packing',
        'packing>shipped', 'shipped>delivered', 'packing>cancelled');
INSERT INTO shop.shipments (order_id) SELECT id FROM shop.orders;

-- what each step answered, and what it must answer
CREATE TEMP TABLE act3 (
    ord      serial,
    step     text NOT NULL,
    answer   text,
    expected text NOT NULL,
    note     text
);

SELECT min(order_id) AS order_id FROM shop.shipments \gset

-------------------------------------------------------------------------------
-- A message delivered twice, a cancel that comes too late, a bad UPDATE
-------------------------------------------------------------------------------
INSERT INTO act3 (step, answer, expected, note)
SELECT format('"ship order %s" message', :order_id),
       public.idem_transition('shop.shipments', :order_id::bigint, 'shipped', ARRAY['packing']),
       'applied', 'packing -> shipped';

INSERT INTO act3 (step, answer, expected, note)
SELECT 'the same message, redelivered',
       public.idem_transition('shop.shipments', :order_id::bigint, 'shipped', ARRAY['packing']),
       'already', 'idempotent success: nothing written';

INSERT INTO act3 (step, answer, expected, note)
SELECT 'cancel it (allowed only from packing)',
       public.idem_transition('shop.shipments', :order_id::bigint, 'cancelled', ARRAY['packing']),
       'rejected', 'it is shipped: nothing written';

-- an admin tool that writes the column directly meets the trigger
DO $$
BEGIN
    UPDATE shop.shipments SET status = 'packing'
     WHERE order_id = (SELECT min(order_id) FROM shop.shipments);
    INSERT INTO act3 (step, answer, expected)
    VALUES ('UPDATE it back to packing', 'updated', 'IK005');
EXCEPTION WHEN SQLSTATE 'IK005' THEN
    INSERT INTO act3 (step, answer, expected, note)
    VALUES ('UPDATE it back to packing', 'IK005', 'IK005', SQLERRM);
END
$$;

-------------------------------------------------------------------------------
-- A checkout form submitted twice (double click)
-------------------------------------------------------------------------------
SELECT public.idem_token_issue('checkout', ttl => '10 minutes') AS form_token \gset

INSERT INTO act3 (step, answer, expected, note)
SELECT 'checkout form submitted',
       CASE WHEN public.idem_token_consume(:'form_token', 'checkout')
            THEN 'accepted' ELSE 'refused' END,
       'accepted', format('token %s', :'form_token');

INSERT INTO act3 (step, answer, expected, note)
SELECT 'the same form, submitted again',
       CASE WHEN public.idem_token_consume(:'form_token', 'checkout')
            THEN 'accepted' ELSE 'refused' END,
       'refused', 'the token was used: no second order';

-------------------------------------------------------------------------------
-- Report and checks
-------------------------------------------------------------------------------
\echo
\echo 'Act three: a status that moves once, a form submitted twice (examples/guards_demo.sql)'
SELECT format('  %-4s  %-40s %-9s %s',
              CASE WHEN answer IS NOT DISTINCT FROM expected THEN 'ok' ELSE 'FAIL' END,
              step, coalesce(answer, 'NULL'),
              CASE WHEN answer IS NOT DISTINCT FROM expected THEN coalesce(note, '')
                   ELSE format('expected %s', expected) END)
  FROM act3 ORDER BY ord;

DO $$
DECLARE
    failed int;
    status text;
    consumed bigint;
BEGIN
    SELECT count(*) INTO failed FROM act3 WHERE answer IS DISTINCT FROM expected;
    SELECT s.status INTO status FROM shop.shipments s
     WHERE s.order_id = (SELECT min(order_id) FROM shop.shipments);
    SELECT count(*) INTO consumed FROM public.idempotency_token
     WHERE scope = 'checkout' AND consumed_at IS NOT NULL;
    IF failed > 0 OR status IS DISTINCT FROM 'shipped' OR consumed <> 1 THEN
        RAISE EXCEPTION 'act three FAILED: % step(s) answered otherwise, shipment is %, % token(s) consumed',
            failed, status, consumed;
    END IF;
END
$$;
\echo 'act three passed: a replayed transition answered already, an illegal one IK005, a double submit refused'
