package io.idempotency.spring.example;

import io.idempotency.spring.Idempotent;

import org.springframework.transaction.annotation.Transactional;

/** Returns a Receipt declared as Object: Jackson would read a replay back as a LinkedHashMap. */
public class ObjectReturningService implements ObjectReturns {

    @Override
    @Transactional
    @Idempotent(key = "#key", scope = "#account")
    public Object receipt(String account, String key) {
        return new Receipt(1, "declared as Object");
    }
}
