package io.idempotency.spring.bench;

import io.idempotency.spring.example.PaymentRequest;

/** The one method the duplicate storm calls, with the lock or with @Idempotent around it. */
public interface StormPayments {
    long pay(PaymentRequest req);
}
