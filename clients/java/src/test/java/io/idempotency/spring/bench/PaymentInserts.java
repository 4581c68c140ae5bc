package io.idempotency.spring.bench;

import io.idempotency.spring.example.PaymentRequest;

import org.springframework.jdbc.core.JdbcTemplate;

/** The business write both storm services make: one payment row. */
abstract class PaymentInserts implements StormPayments {

    private final JdbcTemplate jdbc;

    PaymentInserts(JdbcTemplate jdbc) {
        this.jdbc = jdbc;
    }

    long insert(PaymentRequest req) {
        return jdbc.queryForObject("INSERT INTO payment (request_id, account, amount) VALUES (?, ?, ?) RETURNING id",
                                   Long.class, req.getRequestId(), req.getAccount(), req.getAmount());
    }
}
