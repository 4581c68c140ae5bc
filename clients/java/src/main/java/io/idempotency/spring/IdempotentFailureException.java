package io.idempotency.spring;

/**
 * Replay of a stored final failure that cannot be thrown as its own type
 * again (no constructor taking a message, or a type not listed in
 * {@link Idempotent#storeFailures()}, or written by other code).
 */
public class IdempotentFailureException extends IdempotencyException {

    private static final long serialVersionUID = 1L;

    private final String error;

    public IdempotentFailureException(String key, String scope, String error) {
        super("idempotency key \"" + key + "\" failed before: " + error, key, scope, null);
        this.error = error;
    }

    /** The stored error, JSON. */
    public String getError() {
        return error;
    }
}
