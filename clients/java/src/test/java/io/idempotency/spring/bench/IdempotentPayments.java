package io.idempotency.spring.bench;

import io.idempotency.spring.Idempotent;
import io.idempotency.spring.example.PaymentRequest;

import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.annotation.Transactional;

/** pay with @Idempotent: a duplicate gets the first payment's id. */
public class IdempotentPayments extends PaymentInserts {

    public IdempotentPayments(JdbcTemplate jdbc) {
        super(jdbc);
    }

    @Override
    @Transactional
    @Idempotent(key = "#req.requestId", scope = "#req.account")
    public long pay(PaymentRequest req) {
        return insert(req);
    }
}
