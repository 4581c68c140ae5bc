package io.idempotency.spring;

/**
 * SQLSTATE 40001 or 40P01 (serialization failure, deadlock) in an
 * idempotency call: the transaction rolls back and the key is free; run the
 * call again with the same key. HTTP 503 with {@code Retry-After: 1},
 * {@code urn:idempotency:retry}.
 */
public class IdempotencyRetryException extends IdempotencyException {

    private static final long serialVersionUID = 1L;

    public IdempotencyRetryException(String key, String scope, Throwable cause) {
        super("idempotency key \"" + key + "\": serialization failure or deadlock; retry with the same key",
              key, scope, cause);
    }
}
