package io.idempotency.spring;

/**
 * SQLSTATE IK002/IK003: a leased call is no longer the holder of its key (its
 * lease ended and another call took the key over, or the record is gone).
 * Its outcome is not recorded; in a transaction its writes roll back. HTTP 409.
 */
public class IdempotencyLeaseLostException extends IdempotencyException {

    private static final long serialVersionUID = 1L;

    public IdempotencyLeaseLostException(String key, String scope, Throwable cause) {
        super("idempotency key \"" + key + "\" is no longer held by this call (taken over)", key, scope, cause);
    }
}
