package io.idempotency.spring.example;

import javax.sql.DataSource;

import io.idempotency.spring.IdempotencyAspect;

import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;

/**
 * The beans of the test application without the proxies that apply
 * transactions and the idempotency aspect (PaymentApplication adds them):
 * the database's beans, the aspect, the payment service.
 */
public class PaymentBeans extends DatabaseBeans {

    @Bean
    public IdempotencyAspect idempotencyAspect(DataSource dataSource) {
        return new IdempotencyAspect(dataSource);
    }

    @Bean
    public PaymentProvider paymentProvider() {
        return new PaymentProvider();
    }

    @Bean
    public PaymentService paymentService(JdbcTemplate jdbc, PaymentProvider provider) {
        return new IdempotentPaymentService(jdbc, provider);
    }
}
