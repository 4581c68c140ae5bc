package io.idempotency.spring;

/** What one call of an {@link Idempotent} method claims: key, scope, fingerprint (JSON or null), ttl, lease. */
final class Request {
    final String key;
    final String scope;
    final String fingerprintJson;
    final String ttl;
    final String lease;

    Request(String key, String scope, String fingerprintJson, String ttl, String lease) {
        this.key = key;
        this.scope = scope;
        this.fingerprintJson = fingerprintJson;
        this.ttl = ttl;
        this.lease = lease;
    }
}
