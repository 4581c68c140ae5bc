package io.idempotency.spring;

import java.time.Duration;

/**
 * The key is held by a live lease (or its outcome is unknown): the first
 * call is still running. HTTP 409 with {@code Retry-After}.
 */
public class IdempotencyInProgressException extends IdempotencyException {

    private static final long serialVersionUID = 1L;

    private final Duration retryAfter;

    public IdempotencyInProgressException(String key, String scope, Duration retryAfter) {
        super("idempotency key \"" + key + "\" is in progress; retry after " + retryAfter.toMillis() + " ms",
              key, scope, null);
        this.retryAfter = retryAfter;
    }

    /** When to try again: the lease time left when short, else idempotency.retry_after. */
    public Duration getRetryAfter() {
        return retryAfter;
    }
}
