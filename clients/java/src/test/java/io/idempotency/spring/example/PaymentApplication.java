package io.idempotency.spring.example;

import javax.sql.DataSource;

import com.zaxxer.hikari.HikariDataSource;

import io.idempotency.spring.IdempotencyAspect;

import org.springframework.aop.aspectj.annotation.AnnotationAwareAspectJAutoProxyCreator;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.annotation.AnnotationTransactionAttributeSource;
import org.springframework.transaction.interceptor.BeanFactoryTransactionAttributeSourceAdvisor;
import org.springframework.transaction.interceptor.TransactionInterceptor;

/**
 * The application context of the tests: HikariCP on the database named by
 * the system property idempotency.jdbcUrl, transactions ordered before
 * the idempotency aspect.
 *
 * <p>In an application this is {@code @Configuration @EnableAspectJAutoProxy
 * @EnableTransactionManagement(order = 0)}. Debian's build of Spring 4.3
 * cannot generate CGLIB classes (its repackaged ASM refuses them), and those
 * annotations need CGLIB for their @Configuration classes; so this class
 * declares the two beans they would (lite @Bean mode, JDK proxies).
 */
public class PaymentApplication {

    /** What @EnableAspectJAutoProxy registers: applies @Aspect beans and advisors. */
    @Bean
    public static AnnotationAwareAspectJAutoProxyCreator autoProxyCreator() {
        return new AnnotationAwareAspectJAutoProxyCreator();
    }

    /** What @EnableTransactionManagement(order = 0) registers: @Transactional, outside the aspect. */
    @Bean
    public BeanFactoryTransactionAttributeSourceAdvisor transactionAdvisor(PlatformTransactionManager transactions) {
        AnnotationTransactionAttributeSource attributes = new AnnotationTransactionAttributeSource();
        BeanFactoryTransactionAttributeSourceAdvisor advisor = new BeanFactoryTransactionAttributeSourceAdvisor();
        advisor.setTransactionAttributeSource(attributes);
        advisor.setAdvice(new TransactionInterceptor(transactions, attributes));
        advisor.setOrder(0);
        return advisor;
    }

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
