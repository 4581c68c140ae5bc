-- idem_fingerprint: SHA-256 of a canonical form of a jsonb body, and the
-- check a claim makes with it
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'

-- 32 bytes of SHA-256, stable across releases: the fingerprint is stored
-- in records, so a change here would turn retries into IK001
SELECT length(idem_fingerprint('{}')) AS bytes;
SELECT idem_fingerprint('{"sku": 7, "qty": 1}');

CREATE TEMP TABLE fp_pairs (a jsonb, b jsonb, same boolean);
INSERT INTO fp_pairs VALUES
    -- object key order and white space do not matter
    ('{"a":1,"b":2}',            '{ "b" : 2, "a" : 1 }',        true),
    -- numbers are compared by value
    ('{"a":1}',                  '{"a":1.0}',                   true),
    ('{"a":1}',                  '{"a":1e0}',                   true),
    ('{"a":1}',                  '{"a":1.00}',                  true),
    ('{"a":100}',                '{"a":1E2}',                   true),
    ('{"a":0}',                  '{"a":-0.0}',                  true),
    ('{"a":0.5}',                '{"a":5e-1}',                  true),
    ('{"a":1}',                  '{"a":2}',                     false),
    ('{"a":1}',                  '{"a":1.000000000000000000001}', false),
    -- types matter
    ('{"a":"1"}',                '{"a":1}',                     false),
    ('{"a":true}',               '{"a":"true"}',                false),
    ('{"a":null}',               '{}',                          false),
    ('{"a":null}',               '{"a":"null"}',                false),
    ('1',                        '[1]',                         false),
    ('"a"',                      '["a"]',                       false),
    ('[]',                       '{}',                          false),
    -- array order matters
    ('{"a":[1,2]}',              '{"a":[2,1]}',                 false),
    ('{"a":[1,2]}',              '{"a":[1.0,2e0]}',             true),
    -- nested objects are canonical too
    ('{"o":{"x":1,"y":{"p":1,"q":2}}}', '{"o":{"y":{"q":2.0,"p":1},"x":1}}', true),
    ('{"o":{"x":1}}',            '{"o":{"x":1},"p":null}',      false),
    -- structure is not ambiguous
    ('["ab"]',                   '["a","b"]',                   false),
    ('[["a"],"b"]',              '[["a","b"]]',                 false),
    ('{"a":{"b":1}}',            '{"a":{},"b":1}',              false),
    ('{"ab":"c"}',               '{"a":"bc"}',                  false),
    -- duplicate keys: the last one wins, as in jsonb
    ('{"a":1,"a":2}',            '{"a":2}',                     true),
    ('{"a":1,"a":2}',            '{"a":1}',                     false),
    -- strings are compared after JSON unescaping, byte for byte
    ('{"s":"\u00e9"}',           '{"s":"é"}',                   true),
    ('{"s":"e\u0301"}',          '{"s":"é"}',                   false),
    ('{"s":"A"}',                '{"s":"a"}',                   false);

SELECT a, b, same AS expected, (idem_fingerprint(a) = idem_fingerprint(b)) AS got
  FROM fp_pairs
 WHERE (idem_fingerprint(a) = idem_fingerprint(b)) IS DISTINCT FROM same;
SELECT count(*) AS pairs_checked FROM fp_pairs;

-- a claim compares the fingerprint on every path a duplicate can take: a
-- finished record, a live leased claim, an unknown outcome (an uncommitted
-- claim of another transaction: test/specs); a claim without one skips the
-- check
\i sql/include/try.sql
TRUNCATE idempotent_record;
INSERT INTO idempotent_record (key, status, fingerprint, result, locked_until, created_at, updated_at, expires_at)
VALUES ('fp-finished', 'succeeded', idem_fingerprint('{"v": "A"}'), '{"r": "A"}', NULL, now(), now(), now() + interval '1 day'),
       ('fp-leased', 'in_progress', idem_fingerprint('{"v": "A"}'), NULL, now() + interval '1 hour', now(), now(), now() + interval '1 day'),
       ('fp-unknown', 'unknown', idem_fingerprint('{"v": "A"}'), NULL, NULL, now(), now(), now() + interval '1 day');
SELECT key,
       pg_temp.try(format($$SELECT outcome FROM idem_claim(%L, fingerprint => idem_fingerprint('{"v": "A"}'))$$, key)) AS same_body,
       pg_temp.try(format($$SELECT outcome FROM idem_claim(%L, fingerprint => idem_fingerprint('{"v": "B"}'))$$, key)) AS other_body,
       pg_temp.try(format($$SELECT outcome FROM idem_claim(%L)$$, key)) AS no_fingerprint
  FROM idempotent_record ORDER BY key;
TRUNCATE idempotent_record;
