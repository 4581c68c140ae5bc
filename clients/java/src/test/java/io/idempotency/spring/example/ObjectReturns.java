package io.idempotency.spring.example;

/** A service whose @Idempotent method is declared to return Object: refused when the context starts. */
public interface ObjectReturns {

    Object receipt(String account, String key);
}
