package io.idempotency.spring;

/** Base of the exceptions {@link Idempotent} methods throw instead of running. */
public class IdempotencyException extends RuntimeException {

    private static final long serialVersionUID = 1L;

    private final String key;
    private final String scope;

    public IdempotencyException(String message, String key, String scope, Throwable cause) {
        super(message, cause);
        this.key = key;
        this.scope = scope;
    }

    public String getKey() {
        return key;
    }

    public String getScope() {
        return scope;
    }
}
