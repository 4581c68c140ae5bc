package io.idempotency.spring;

/**
 * SQLSTATE 42501: the database role may not use this scope (the extension's
 * scope grants). HTTP 403, {@code urn:idempotency:scope-forbidden}.
 */
public class IdempotencyScopeForbiddenException extends IdempotencyException {

    private static final long serialVersionUID = 1L;

    public IdempotencyScopeForbiddenException(String key, String scope, Throwable cause) {
        super("idempotency scope \"" + scope + "\" is not permitted for this database role", key, scope, cause);
    }
}
