package io.idempotency.spring;

/**
 * The scope expression of an {@link Idempotent} method gave null or an empty
 * string: the call is refused before anything is claimed or stored, and the
 * method does not run. The scope comes from the authenticated principal the
 * application established, or is an explicit constant. HTTP 403,
 * {@code urn:idempotency:scope-missing}.
 */
public class IdempotencyScopeMissingException extends IdempotencyException {

    private static final long serialVersionUID = 1L;

    public IdempotencyScopeMissingException(String key, String expression) {
        super("the scope \"" + expression + "\" of idempotency key \"" + key + "\" gave nothing;"
              + " refused before claiming", key, null, null);
    }
}
