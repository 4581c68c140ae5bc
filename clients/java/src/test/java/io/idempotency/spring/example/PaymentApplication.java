package io.idempotency.spring.example;

import org.springframework.aop.aspectj.annotation.AnnotationAwareAspectJAutoProxyCreator;
import org.springframework.context.annotation.Bean;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.annotation.AnnotationTransactionAttributeSource;
import org.springframework.transaction.interceptor.BeanFactoryTransactionAttributeSourceAdvisor;
import org.springframework.transaction.interceptor.TransactionInterceptor;

/**
 * The application context of the tests: PaymentBeans with transactions
 * ordered before the idempotency aspect, in the bean layout of the README's
 * setup. In an application with CGLIB this is {@code @Configuration
 * @EnableAspectJAutoProxy @EnableTransactionManagement(order = 0)}; Debian's
 * build of Spring 4.3 cannot generate CGLIB classes (its repackaged ASM
 * refuses them), so this class declares the two beans those annotations
 * would (lite @Bean mode, JDK proxies).
 */
public class PaymentApplication extends PaymentBeans {

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
}
