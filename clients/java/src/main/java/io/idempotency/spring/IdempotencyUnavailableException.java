package io.idempotency.spring;

/**
 * The database is unavailable or the session ended: SQLSTATE class 08,
 * 57P01, 57P02, 57P03, 57014, 25P03, 53300, a pool that cannot connect, or
 * one of the two errors Citus raises right after a shard move. Nothing of
 * the call committed, except when the error came at COMMIT itself; a retry
 * with the same key replays or runs once. HTTP 503 with
 * {@code Retry-After: 1}, {@code urn:idempotency:unavailable}.
 */
public class IdempotencyUnavailableException extends IdempotencyException {

    private static final long serialVersionUID = 1L;

    public IdempotencyUnavailableException(String key, String scope, Throwable cause) {
        super("idempotency key \"" + key + "\": the database is unavailable; retry with the same key",
              key, scope, cause);
    }
}
