/* idempotency--1.1--1.2.sql: ALTER EXTENSION idempotency UPDATE TO '1.2' */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.2'" to load this file. \quit

-------------------------------------------------------------------------------
-- Expiry without a B-tree entry per record
-------------------------------------------------------------------------------

-- Purge finds expired records through a B-tree on the minute of expires_at
-- (date_bin) instead of expires_at itself: the records of one minute share
-- one index entry (B-tree deduplication), 6 to 8 bytes per record instead
-- of an entry of 22 bytes or more.  Purge walks the buckets oldest first
-- and checks expires_at itself in the rows.  (A BRIN index is smaller
-- still, but its ranges only ever widen: once VACUUM lets new records fill
-- the space of purged ones, every range matches and each batch reads the
-- whole table.)  The table and its records, privileges and comments are
-- untouched; building the index reads the table once, blocking writes to
-- it meanwhile (a few seconds per million records).
DROP INDEX @extschema@.idempotent_record_expires_at_idx;
CREATE INDEX idempotent_record_expires_at_idx
    ON @extschema@.idempotent_record
    (pg_catalog.date_bin('1 minute', expires_at, '2000-01-01 00:00:00+00'));
COMMENT ON INDEX @extschema@.idempotent_record_expires_at_idx IS
'expires_at by the minute (one deduplicated B-tree entry per minute): purge walks it oldest minute first';
