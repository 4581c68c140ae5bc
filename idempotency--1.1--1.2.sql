/* idempotency--1.1--1.2.sql: ALTER EXTENSION idempotency UPDATE TO '1.2' */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.2'" to load this file. \quit

-------------------------------------------------------------------------------
-- Expiry without a B-tree entry per record
-------------------------------------------------------------------------------

-- Purge finds expired records through a BRIN index on expires_at: one
-- summary (the smallest and largest expires_at) per 32 heap pages instead
-- of one B-tree entry per record (22.5 bytes per record, about 7% of a
-- record, and a page of cache per ~350 records).  Records are inserted in
-- about the order they expire, so the ranges holding expired records are
-- few and at the start of the table; purge reads those ranges only.
-- autosummarize: autovacuum summarizes each range that fills up (a range
-- not yet summarized is read by every purge).  The table and its records,
-- privileges and comments are untouched; building the index reads the
-- table once, blocking writes to it meanwhile (a few seconds per million
-- records).
DROP INDEX @extschema@.idempotent_record_expires_at_idx;
CREATE INDEX idempotent_record_expires_at_idx
    ON @extschema@.idempotent_record USING brin (expires_at)
    WITH (pages_per_range = 32, autosummarize = on);
COMMENT ON INDEX @extschema@.idempotent_record_expires_at_idx IS
'BRIN summaries of expires_at per 32 heap pages: purge reads only the ranges that may hold expired records';
