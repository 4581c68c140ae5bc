package io.idempotency.spring.example;

import javax.sql.DataSource;

import com.zaxxer.hikari.HikariDataSource;

import io.idempotency.spring.IdempotencyAspect;

import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.PlatformTransactionManager;

/**
 * The beans of the test application without the proxies that apply
 * transactions and the idempotency aspect (PaymentApplication adds them):
 * HikariCP on the database named by the system property
 * idempotency.jdbcUrl, the aspect, the payment service.
 */
public class PaymentBeans {

    @Bean(destroyMethod = "close")
    public HikariDataSource dataSource() {
        HikariDataSource ds = new HikariDataSource();
        ds.setJdbcUrl(System.getProperty("idempotency.jdbcUrl"));
        ds.setMaximumPoolSize(40);
        return ds;
    }

    @Bean
    public PlatformTransactionManager transactionManager(DataSource dataSource) {
        return new DataSourceTransactionManager(dataSource);
    }

    @Bean
    public JdbcTemplate jdbcTemplate(DataSource dataSource) {
        return new JdbcTemplate(dataSource);
    }

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
