package io.idempotency.spring.bench;

/** The lock pattern's answer to a concurrent duplicate: try again later. */
public class LockBusyException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public LockBusyException(String key) {
        super("locked: " + key);
    }
}
