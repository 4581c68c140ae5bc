-- idem_finish_response: the stored form of an HTTP response, built from
-- the body's bytes; what the client packages record and replay
\set VERBOSITY terse
\i sql/include/try.sql
TRUNCATE idempotent_record;

-- pg_temp.stored(body): the result recorded for a response with body
CREATE FUNCTION pg_temp.stored(body bytea) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    k text := 'stored-' || md5(body::text);
BEGIN
    PERFORM idem_claim(k);
    PERFORM idem_finish_response(k, 201, '{"content-type": "text/plain"}', body);
    RETURN (SELECT result FROM idem_lookup(k));
END $$;
-- pg_temp.replayed(result): the bytes a package replays from a result
CREATE FUNCTION pg_temp.replayed(result jsonb) RETURNS bytea LANGUAGE sql AS $$
    SELECT CASE WHEN result ? 'body_base64' THEN decode(result->>'body_base64', 'base64')
                ELSE convert_to(result->>'body', 'UTF8') END
$$;

-- UTF-8 text is kept as "body", other bytes as "body_base64"; status and
-- headers as given
BEGIN;
SELECT pg_temp.stored(convert_to('{"order_id": 1, "note": "é€😀"}', 'UTF8')) AS text_body;
SELECT pg_temp.stored('\x00ff01'::bytea) AS bytes_body;
SELECT pg_temp.stored(''::bytea) AS empty_body;
-- JSON-looking text stays one string, byte for byte (jsonb would reorder
-- the keys of a parsed body and drop its white space)
SELECT pg_temp.stored(convert_to('{"b": 1,  "a": 2}"}\', 'UTF8'))->>'body' AS json_text;
-- not text: NUL, an invalid byte, a truncated character, a surrogate
SELECT label, pg_temp.stored(body) ? 'body_base64' AS base64
  FROM (VALUES ('NUL', convert_to('a', 'UTF8') || '\x00'::bytea || convert_to('b', 'UTF8')),
               ('invalid byte', '\x61ff62'::bytea),
               ('truncated character', '\x61e282'::bytea),
               ('surrogate', '\xeda080'::bytea),
               ('overlong', '\xc0af'::bytea),
               ('valid 4-byte', '\xf09f9880'::bytea)) AS t(label, body);
-- every byte value, at every position modulo 3: base64 without line
-- breaks, as encode() gives it once its breaks are removed, and the same
-- bytes back
SELECT n, r->>'body_base64' = translate(encode(b, 'base64'), E'\n', '') AS as_encode,
       position(E'\n' IN r->>'body_base64') = 0 AS one_line,
       pg_temp.replayed(r) = b AS same_bytes
  FROM (SELECT n, b, pg_temp.stored(b) AS r
          FROM (SELECT n, decode(string_agg(lpad(to_hex((i * 7 + n) % 256), 2, '0'), '' ORDER BY i), 'hex') AS b
                  FROM generate_series(0, 2) n, generate_series(0, 299 + n) i GROUP BY n) s) t
 ORDER BY n;
-- a large text body (2 MB, stored out of line) replays the same bytes
SELECT pg_temp.replayed(pg_temp.stored(b)) = b AS large_same_bytes
  FROM (SELECT convert_to(repeat('{"sku": "é"},' || E'\n', 150000), 'UTF8') AS b) s;
ROLLBACK;

-- results are compressed with lz4 where the server has it (pglz would
-- run over most of a large base64 body that does not compress)
SELECT attcompression = CASE WHEN 'lz4' = ANY (enumvals) THEN 'l' ELSE '' END AS lz4_where_available
  FROM pg_attribute, pg_settings
 WHERE attrelid = 'idempotent_record'::regclass AND attname = 'result' AND name = 'default_toast_compression';

-- as idem_finish: replayed to every duplicate, with status succeeded
BEGIN;
SELECT outcome FROM idem_claim('order-1');
SELECT idem_finish_response('order-1', 201, '{"content-type": "application/json", "location": ["/orders/1"]}',
                            convert_to('{"order_id": 1}', 'UTF8'));
COMMIT;
SELECT outcome, status, result FROM idem_claim('order-1');

-- a leased claim needs its fence; a stale one changes nothing
SELECT outcome, fence FROM idem_claim('order-2', lease => '1 minute');
SELECT call, pg_temp.try(call) AS answer FROM (VALUES
  ($$SELECT idem_finish_response('order-2', 201, '{}', '\x01')$$),
  ($$SELECT idem_finish_response('order-2', 201, '{}', '\x01', fence => 2)$$),
  ($$SELECT idem_finish_response('never-claimed', 201, '{}', '\x01')$$)) AS c(call);
SELECT idem_finish_response('order-2', 200, '{}', convert_to('done', 'UTF8'), fence => 1);
SELECT status, result FROM idem_lookup('order-2');
SELECT pg_temp.try($$SELECT idem_finish_response('order-2', 200, '{}', '\x01', fence => 1)$$) AS second_outcome;

-- bad input: 22004 for a NULL, 22023 for a status that is not three
-- digits or headers a replay could not send (not an object, a name that
-- is not a token, a value that is not a string or an array of strings,
-- CR or LF in a value); nothing is recorded
SELECT call, pg_temp.try('SELECT idem_claim(''bad''); ' || call) AS answer FROM (VALUES
  ($$SELECT idem_finish_response(NULL, 201, '{}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', NULL, '{}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, NULL, '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, '{}', NULL)$$),
  ($$SELECT idem_finish_response('bad', 201, '{}', '\x01', scope => NULL)$$),
  ($$SELECT idem_finish_response('bad', 99, '{}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 1000, '{}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', -201, '{}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, '[]', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, '"text/plain"', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, 'null', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, '{"x-split": "a\r\nset-cookie: stolen"}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, '{"x-lf": ["ok", "a\nb"]}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, '{"x-object": {"a": "b"}}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, '{"x-number": 5}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, '{"x-null": null}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, '{"x-nested": [["a"]]}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, '{"x-mixed": ["a", 1]}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, '{"bad name": "v"}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, '{"": "v"}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, '{"x-ok": "v", "x:colon": "v"}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 201, '{"link": ["<a>", "<b>"], "X-Token_1.~": "tab\there é"}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 100, '{}', '\x01')$$),
  ($$SELECT idem_finish_response('bad', 999, '{}', '\x01')$$)) AS c(call);
SELECT count(*) AS recorded FROM idempotent_record WHERE key = 'bad';

-- in a database that is not UTF-8 every body is kept as base64 (a jsonb
-- string holds the database's characters), and replays the same bytes
\set regress_db :DBNAME
CREATE DATABASE regress_finish_response_ascii ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
\c regress_finish_response_ascii
CREATE EXTENSION idempotency;
BEGIN;
SELECT outcome FROM idem_claim('ascii-1');
SELECT idem_finish_response('ascii-1', 200, '{}', '\x61c3a9'::bytea);
SELECT result, decode(result->>'body_base64', 'base64') AS bytes FROM idem_lookup('ascii-1');
ROLLBACK;
\c :regress_db
DROP DATABASE regress_finish_response_ascii;
