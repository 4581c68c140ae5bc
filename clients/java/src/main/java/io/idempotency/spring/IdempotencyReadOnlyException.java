package io.idempotency.spring;

/**
 * SQLSTATE 25006: the database refused the claim's write (a standby, or
 * {@code default_transaction_read_only}). HTTP 503 with
 * {@code Retry-After: 1}, {@code urn:idempotency:read-only}.
 */
public class IdempotencyReadOnlyException extends IdempotencyException {

    private static final long serialVersionUID = 1L;

    public IdempotencyReadOnlyException(String key, String scope, Throwable cause) {
        super("idempotency key \"" + key + "\": the database is read-only", key, scope, cause);
    }
}
