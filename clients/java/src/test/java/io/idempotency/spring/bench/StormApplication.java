package io.idempotency.spring.bench;

import io.idempotency.spring.example.PaymentApplication;

import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;

/** The test application plus the Redis lock (redis-server on 127.0.0.1, port idempotency.redisPort). */
public class StormApplication extends PaymentApplication {

    @Bean
    public RedisLockAspect redisLockAspect() {
        return new RedisLockAspect("127.0.0.1", Integer.getInteger("idempotency.redisPort"));
    }

    @Bean
    public LockedPayments lockedPayments(JdbcTemplate jdbc) {
        return new LockedPayments(jdbc);
    }

    @Bean
    public IdempotentPayments idempotentPayments(JdbcTemplate jdbc) {
        return new IdempotentPayments(jdbc);
    }
}
