package io.idempotency.spring.example;

import org.springframework.jdbc.core.JdbcTemplate;

/** The payment table of the example: no unique key on request_id, so only the claim keeps duplicates out. */
public final class PaymentTable {

    private PaymentTable() {
    }

    public static void create(JdbcTemplate jdbc) {
        jdbc.execute("CREATE TABLE IF NOT EXISTS payment (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
                + " request_id text NOT NULL, account text NOT NULL, amount int NOT NULL, fence bigint)");
    }
}
