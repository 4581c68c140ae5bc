-- Records and tokens are the rows of idempotent_record and
-- idempotency_token themselves.  A table that inherits from one of them
-- holds rows of its own: no statement of the extension reads, changes or
-- deletes them, and the primary key, which names a record or a token, is
-- unique among the rows the statements do read.  Purge above all: it must
-- never delete a live record because a row of another table sits at the
-- same physical position (ctid) as an expired one.
TRUNCATE idempotent_record, idempotency_token;
CREATE TABLE inheriting_archive () INHERITS (idempotent_record);
CREATE TABLE inheriting_tokens () INHERITS (idempotency_token);

-- a live record in the table, an expired row at the same ctid in the child
INSERT INTO idempotent_record (key, status, result, fence, created_at, updated_at, expires_at)
VALUES ('live', 'succeeded', '{"charged": 1}', 1, now(), now(), now() + interval '1 day');
INSERT INTO inheriting_archive (key, status, result, fence, created_at, updated_at, expires_at)
VALUES ('archived-old', 'succeeded', '{}', 1, now() - interval '2 days', now() - interval '2 days', now() - interval '1 day');
SELECT (SELECT ctid FROM ONLY idempotent_record WHERE key = 'live') =
       (SELECT ctid FROM inheriting_archive WHERE key = 'archived-old') AS same_ctid;
-- ... and the same for tokens
INSERT INTO idempotency_token (scope, token, created_at, expires_at)
VALUES ('form', 'live-token', now(), now() + interval '1 hour');
INSERT INTO inheriting_tokens (scope, token, created_at, expires_at)
VALUES ('form', 'old-token', now() - interval '2 hours', now() - interval '1 hour');
SELECT (SELECT ctid FROM ONLY idempotency_token WHERE token = 'live-token') =
       (SELECT ctid FROM inheriting_tokens WHERE token = 'old-token') AS same_ctid;

-- purge deletes nothing: nothing in the tables has expired
SELECT idem_purge(100) AS purged;
SELECT outcome, result FROM idem_claim('live');
SELECT idem_token_consume('live-token', 'form') AS consumed;
SELECT tableoid::regclass AS "table", key FROM idempotent_record ORDER BY key;
SELECT tableoid::regclass AS "table", token FROM idempotency_token ORDER BY token;

-- expired records in both: purge deletes the table's own, in batches
INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
SELECT 'old-' || i, 'succeeded', 1, now() - interval '2 days', now() - interval '2 days', now() - interval '1 day'
  FROM generate_series(1, 3) AS i;
INSERT INTO inheriting_archive (key, status, fence, created_at, updated_at, expires_at)
SELECT 'old-' || i, 'succeeded', 1, now() - interval '2 days', now() - interval '2 days', now() - interval '1 day'
  FROM generate_series(1, 3) AS i;
SELECT idem_purge(2) AS purged;
SELECT idem_purge(2) AS purged;
SELECT tableoid::regclass AS "table", key FROM idempotent_record ORDER BY key, 1;

-- the child's rows are not records: a claim, a lookup and the outcome see
-- the table alone, also when the child holds the same key
INSERT INTO inheriting_archive (key, status, result, fence, created_at, updated_at, expires_at)
VALUES ('both', 'succeeded', '{"archived": true}', 1, now(), now(), now() + interval '1 day'),
       ('pending', 'unknown', '{}', 1, now(), now(), now() + interval '1 day');
SELECT count(*) AS found FROM idem_lookup('both');
BEGIN;
SELECT outcome, fence FROM idem_claim('both');
SELECT idem_finish('both', '{"new": true}');
COMMIT;
SELECT tableoid::regclass AS "table", status, result FROM idempotent_record
 WHERE key = 'both' ORDER BY 1;
SELECT key, status FROM idem_pending;
SELECT idem_finish('pending', '{}', fence => 1);

-- the same with the planned SQL only
SET idempotency.direct_access = off;
SELECT count(*) AS found FROM idem_lookup('pending');
SELECT idem_purge(100) AS purged;
RESET idempotency.direct_access;

DROP TABLE inheriting_archive, inheriting_tokens;
TRUNCATE idempotent_record, idempotency_token;
