package io.idempotency.spring.bench;

import io.idempotency.spring.example.PaymentRequest;

import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.annotation.Transactional;

/** pay under the Redis lock: a duplicate after the unlock pays again. */
public class LockedPayments extends PaymentInserts {

    public LockedPayments(JdbcTemplate jdbc) {
        super(jdbc);
    }

    @Override
    @Transactional
    @RedisLocked(key = "#req.requestId")
    public long pay(PaymentRequest req) {
        return insert(req);
    }
}
