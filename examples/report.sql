-- examples/report.sql — the figures and consistency checks that make demo
-- prints after the load, computed from the shop's tables, its request log
-- and the extension's idempotent_record.  Loaded after examples/shop.sql;
-- scripts/demo.sh fills shop.demo_load once pgbench has finished.

-- What the load was asked to do, and how pgbench ended.
CREATE TABLE shop.demo_load (
    clients             int NOT NULL,
    requests_per_client int NOT NULL,   -- pgbench -t: first tries per client
    pgbench_exit        int NOT NULL
);

COMMENT ON TABLE shop.demo_load IS
'one row written by scripts/demo.sh after the load: pgbench clients, first tries per client (-t) and pgbench''s exit status';

-------------------------------------------------------------------------------
-- Figures: (ord, label, value, note)
-------------------------------------------------------------------------------

CREATE VIEW shop.demo_figures AS
SELECT f.*
  FROM (SELECT count(*) AS requests,
               count(*) FILTER (WHERE retry_of IS NULL) AS first_tries,
               count(*) FILTER (WHERE retry_of IS NOT NULL) AS retries,
               count(DISTINCT request_key) AS keys,
               count(DISTINCT request_key)
                   FILTER (WHERE answer IN ('created', 'replay')) AS accepted_keys,
               count(*) FILTER (WHERE answer = 'created') AS created,
               count(*) FILTER (WHERE answer = 'replay') AS replays,
               count(*) FILTER (WHERE answer = 'in_progress') AS in_progress,
               count(*) FILTER (WHERE answer = 'rejected') AS rejected,
               string_agg(DISTINCT request_key, ', ')
                   FILTER (WHERE answer = 'rejected') AS rejected_keys
          FROM shop.request_log) AS l,
       LATERAL (VALUES
           (1, 'requests sent', l.requests,
               format('%s first tries + %s retries', l.first_tries, l.retries)),
           (2, 'distinct keys', l.keys,
               format('%s of them accepted (created or replayed)', l.accepted_keys)),
           (3, 'orders created', (SELECT count(*) FROM shop.orders),
               format('%s payments', (SELECT count(*) FROM shop.payments))),
           (4, 'replays', l.replays,
               'duplicates answered with the stored first answer'),
           (5, 'in_progress answers', l.in_progress,
               'wait => false met an uncommitted duplicate (then retried)'),
           (6, '422-style rejections', l.rejected,
               CASE WHEN l.rejected > 0
                    THEN format('key reused with a different body: %s', l.rejected_keys)
                    ELSE 'none: no key reuse was detected' END)
       ) AS f(ord, label, value, note);

COMMENT ON VIEW shop.demo_figures IS
'make demo report: requests, keys, orders, replays, in_progress answers and 422 rejections, one (ord, label, value, note) row each';

-------------------------------------------------------------------------------
-- Checks: (ord, name, ok, detail); detail says what is wrong when not ok
-------------------------------------------------------------------------------

CREATE VIEW shop.demo_checks AS
WITH
-- every key that was accepted or has orders, with its orders
key_orders AS (
    SELECT k.request_key,
           count(o.id) AS n,
           min(o.id) AS order_id,
           string_agg(o.id::text, ', ' ORDER BY o.id) AS ids
      FROM (SELECT request_key FROM shop.request_log
             WHERE answer IN ('created', 'replay')
            UNION
            SELECT request_key FROM shop.orders) AS k
      LEFT JOIN shop.orders o USING (request_key)
     GROUP BY k.request_key),
-- answers that name an order: right iff the key has exactly that one order
named AS (
    SELECT l.*, ko.n, ko.ids,  -- ids: the key's order ids
           ko.n = 1 AND l.order_id IS NOT DISTINCT FROM ko.order_id AS right_id
      FROM shop.request_log l
      JOIN key_orders ko USING (request_key)
     WHERE l.answer IN ('created', 'replay')),
-- created answers per key
created AS (
    SELECT ko.request_key, count(l.id) AS n
      FROM key_orders ko
      LEFT JOIN shop.request_log l
             ON l.request_key = ko.request_key AND l.answer = 'created'
     GROUP BY ko.request_key),
-- payments per order
order_payments AS (
    SELECT o.id, o.request_key, count(p.id) AS n
      FROM shop.orders o
      LEFT JOIN shop.payments p ON p.order_id = o.id
     GROUP BY o.id, o.request_key),
-- the extension's record of every accepted key
records AS (
    SELECT ko.request_key, ko.n, r.status, r.result,
           r.status IS NOT DISTINCT FROM 'succeeded' AND ko.n = 1
           AND (r.result ->> 'order_id')::bigint IS NOT DISTINCT FROM ko.order_id AS good
      FROM key_orders ko
      LEFT JOIN public.idempotent_record r
             ON r.scope = 'shop' AND r.key = ko.request_key),
-- in_progress answers, and whether a retry of them got a real answer
busy AS (
    SELECT l.id, l.request_key, l.wait,
           EXISTS (SELECT FROM shop.request_log r
                    WHERE r.retry_of = l.id AND r.answer <> 'in_progress') AS answered
      FROM shop.request_log l
     WHERE l.answer = 'in_progress'),
-- requests whose body does not match their answer: accepted ones must carry
-- the fingerprint stored for the key, rejected ones another one
body_mismatch AS (
    SELECT l.id, l.request_key,
           CASE WHEN r.fingerprint IS NULL THEN 'no fingerprint stored for the key'
                WHEN l.answer = 'rejected' THEN 'rejected, yet its body is the key''s'
                ELSE 'answered ' || l.answer || ' for a different body' END AS why
      FROM shop.request_log l
      LEFT JOIN public.idempotent_record r
             ON r.scope = 'shop' AND r.key = l.request_key
     WHERE (l.answer IN ('created', 'replay')
            AND r.fingerprint IS DISTINCT FROM public.idem_fingerprint(l.body))
        OR (l.answer = 'rejected'
            AND r.fingerprint IS NOT DISTINCT FROM public.idem_fingerprint(l.body))),
logged AS (
    SELECT count(*) FILTER (WHERE retry_of IS NULL) AS first_tries,
           count(DISTINCT request_key)
               FILTER (WHERE answer IN ('created', 'replay')) AS accepted_keys
      FROM shop.request_log),
load AS (
    SELECT clients, requests_per_client, pgbench_exit,
           clients * requests_per_client AS expected
      FROM shop.demo_load),
-- counts that must be exactly one and are not, for checks 4 to 6: how many,
-- and the first three (by key, or by order id)
not_once AS (
    SELECT ord, count(*) AS n,
           string_agg(what, ', ' ORDER BY request_key, id) FILTER (WHERE pos <= 3) AS examples
      FROM (SELECT *, row_number() OVER (PARTITION BY ord ORDER BY request_key, id) AS pos
              FROM (SELECT 4 AS ord, request_key, 0::bigint AS id,
                           format('%s has %s', request_key, n) AS what
                      FROM key_orders WHERE n <> 1
                    UNION ALL
                    SELECT 5, '', id, format('order %s (%s) has %s', id, request_key, n)
                      FROM order_payments WHERE n <> 1
                    UNION ALL
                    SELECT 6, request_key, 0, format('%s %s times', request_key, n)
                      FROM created WHERE n <> 1) AS wrong) AS ranked
     GROUP BY ord)
SELECT o.ord, o.name, coalesce(w.n, 0) = 0 AS ok,
       format(o.detail, coalesce(w.n, 0), w.examples) AS detail
  FROM (VALUES
(4, 'exactly one order per key',
    '%s keys do not have exactly one order, e.g. %s'),
(5, 'exactly one payment per order',
    '%s orders do not have exactly one payment, e.g. %s'),
(6, 'exactly one "created" answer per key',
    '%s keys were answered "created" other than once, e.g. %s')
       ) AS o(ord, name, detail)
  LEFT JOIN not_once w USING (ord)
UNION ALL
SELECT c.*
  FROM logged, load,
       LATERAL (VALUES
(1, 'pgbench ran without errors',
    load.pgbench_exit = 0,
    format('pgbench exited with status %s (its messages are above)', load.pgbench_exit)),

(2, 'every request got a logged answer',
    logged.first_tries = load.expected,
    format('%s first tries logged, but pgbench sent %s (%s clients x %s)',
           logged.first_tries, load.expected, load.clients, load.requests_per_client)),

(3, 'orders created = distinct keys accepted',
    (SELECT count(*) FROM shop.orders) = logged.accepted_keys,
    format('%s orders for %s accepted keys',
           (SELECT count(*) FROM shop.orders), logged.accepted_keys)),

(7, 'every replay (and first answer) names the key''s order',
    NOT EXISTS (SELECT FROM named WHERE NOT right_id),
    format('%s of %s created/replay answers do not name the one order of their key, e.g. %s',
           (SELECT count(*) FROM named WHERE NOT right_id),
           (SELECT count(*) FROM named),
           (SELECT string_agg(format('request %s (%s, %s) got order %s but the key has %s',
                                     id, request_key, answer, coalesce(order_id::text, 'none'),
                                     CASE n WHEN 1 THEN 'order ' || ids
                                            ELSE n || ' orders' END), '; ')
              FROM (SELECT * FROM named WHERE NOT right_id ORDER BY id LIMIT 3) AS e))),

(8, 'every key''s stored result names its order',
    NOT EXISTS (SELECT FROM records WHERE NOT good),
    format('%s keys have no succeeded record naming their one order, e.g. %s',
           (SELECT count(*) FROM records WHERE NOT good),
           (SELECT string_agg(format('%s (record %s, result %s, %s orders)', request_key,
                                     coalesce(status::text, 'missing'),
                                     coalesce(result::text, 'none'), n), ', ')
              FROM (SELECT * FROM records WHERE NOT good
                     ORDER BY request_key LIMIT 3) AS e))),

(9, 'in_progress only for wait => false, and retried',
    NOT EXISTS (SELECT FROM busy WHERE wait OR NOT answered),
    format('%s in_progress answers went to waiting clients, %s were never followed by a retry that got an answer',
           (SELECT count(*) FROM busy WHERE wait),
           (SELECT count(*) FROM busy WHERE NOT answered))),

(10, 'accepted bodies match the key, 422s do not',
    NOT EXISTS (SELECT FROM body_mismatch),
    format('%s answers do not fit the body sent, e.g. %s',
           (SELECT count(*) FROM body_mismatch),
           (SELECT string_agg(format('request %s (%s): %s', id, request_key, why), '; ')
              FROM (SELECT * FROM body_mismatch ORDER BY id LIMIT 3) AS e)))
       ) AS c(ord, name, ok, detail);

COMMENT ON VIEW shop.demo_checks IS
'make demo report: consistency checks, one (ord, name, ok, detail) row each; detail says what is wrong when ok is false';
