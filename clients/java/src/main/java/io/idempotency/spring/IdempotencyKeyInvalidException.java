package io.idempotency.spring;

/**
 * SQLSTATE 22004, 22023 or 22008 from the extension: the key, the scope or
 * an interval (ttl, lease) was refused (too long, null, out of range). HTTP
 * 400, {@code urn:idempotency:key-invalid}.
 */
public class IdempotencyKeyInvalidException extends IdempotencyException {

    private static final long serialVersionUID = 1L;

    public IdempotencyKeyInvalidException(String key, String scope, Throwable cause) {
        super("idempotency key \"" + key + "\" was refused: " + cause.getMessage(), key, scope, cause);
    }
}
