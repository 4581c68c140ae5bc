/* idempotency--1.2--1.3.sql: ALTER EXTENSION idempotency UPDATE TO '1.3' */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.3'" to load this file. \quit
