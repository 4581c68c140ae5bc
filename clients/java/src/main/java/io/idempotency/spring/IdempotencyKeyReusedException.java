package io.idempotency.spring;

/** SQLSTATE IK001: the key was used with another fingerprint (another request body). HTTP 422. */
public class IdempotencyKeyReusedException extends IdempotencyException {

    private static final long serialVersionUID = 1L;

    public IdempotencyKeyReusedException(String key, String scope, Throwable cause) {
        super("idempotency key \"" + key + "\" was used with another request", key, scope, cause);
    }
}
