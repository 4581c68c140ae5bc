package io.idempotency.spring;

import java.io.IOException;
import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import javax.sql.DataSource;

import com.fasterxml.jackson.databind.JavaType;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.aopalliance.aop.Advice;
import org.aspectj.lang.ProceedingJoinPoint;
import org.aspectj.lang.annotation.Around;
import org.aspectj.lang.annotation.Aspect;
import org.aspectj.lang.reflect.MethodSignature;
import org.springframework.aop.Advisor;
import org.springframework.aop.aspectj.AbstractAspectJAdvice;
import org.springframework.aop.framework.Advised;
import org.springframework.aop.framework.AopProxyUtils;
import org.springframework.aop.support.AopUtils;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.beans.factory.BeanFactoryAware;
import org.springframework.beans.factory.SmartInitializingSingleton;
import org.springframework.beans.factory.config.ConfigurableListableBeanFactory;
import org.springframework.context.expression.MethodBasedEvaluationContext;
import org.springframework.core.DefaultParameterNameDiscoverer;
import org.springframework.core.Ordered;
import org.springframework.core.ParameterNameDiscoverer;
import org.springframework.expression.Expression;
import org.springframework.expression.spel.standard.SpelExpressionParser;
import org.springframework.jdbc.datasource.DataSourceUtils;
import org.springframework.transaction.annotation.AnnotationTransactionAttributeSource;
import org.springframework.transaction.interceptor.TransactionAttribute;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;
import org.springframework.util.ReflectionUtils;

/**
 * The advice behind {@link Idempotent}. Register one bean per DataSource,
 * the one the transaction manager manages, with
 * {@code @EnableAspectJAutoProxy} and transactions ordered before it
 * ({@code @EnableTransactionManagement(order = 0)}): an in-transaction claim
 * runs on the transaction's connection, so the claim, the method's writes
 * and the stored return value commit or roll back together.
 *
 * <p>When the context has started, every singleton with {@link Idempotent}
 * methods is checked: a return type a replay cannot read back (such as
 * {@code Object}), or a bean this aspect does not advise, fails the start.
 * The return types of other beans are checked at their first call.
 */
@Aspect
public class IdempotencyAspect implements Ordered, BeanFactoryAware, SmartInitializingSingleton {

    private final DataSource dataSource;
    private final ObjectMapper mapper;
    private final IdempotencyRecords records = new IdempotencyRecords();
    private final SpelExpressionParser parser = new SpelExpressionParser();
    private final ParameterNameDiscoverer parameterNames = new DefaultParameterNameDiscoverer();
    private final AnnotationTransactionAttributeSource transactionAttributes = new AnnotationTransactionAttributeSource();
    private final Map<String, Expression> expressions = new ConcurrentHashMap<>();
    private final Map<Method, Boolean> checkedMethods = new ConcurrentHashMap<>();
    private BeanFactory beanFactory;
    private int order = Ordered.LOWEST_PRECEDENCE;

    public IdempotencyAspect(DataSource dataSource) {
        this(dataSource, new ObjectMapper().findAndRegisterModules());
    }

    /** {@code mapper} serializes return values, fingerprints and failures, and reads replays back. */
    public IdempotencyAspect(DataSource dataSource, ObjectMapper mapper) {
        this.dataSource = dataSource;
        this.mapper = mapper;
    }

    @Override
    public int getOrder() {
        return order;
    }

    /** The advice's precedence; it must run inside the transaction advice (a higher number). */
    public void setOrder(int order) {
        this.order = order;
    }

    @Override
    public void setBeanFactory(BeanFactory beanFactory) {
        this.beanFactory = beanFactory;
    }

    /**
     * Checks every singleton with @Idempotent methods once the context has
     * created them: their return types, and that the bean is proxied with
     * this aspect's advice (else every call would run without a claim).
     */
    @Override
    public void afterSingletonsInstantiated() {
        if (!(beanFactory instanceof ConfigurableListableBeanFactory)) {
            return;
        }
        ConfigurableListableBeanFactory beans = (ConfigurableListableBeanFactory) beanFactory;
        for (String name : beans.getBeanDefinitionNames()) {
            Object bean = beans.containsSingleton(name) ? beans.getSingleton(name) : null;
            if (bean == null) {
                continue;
            }
            List<Method> annotated = new ArrayList<>();
            ReflectionUtils.doWithMethods(AopProxyUtils.ultimateTargetClass(bean), annotated::add,
                    m -> !m.isBridge() && m.isAnnotationPresent(Idempotent.class));
            annotated.forEach(this::checkDeclaration);
            if (!annotated.isEmpty() && !isAdvisedByThisAspect(bean)) {
                throw new IllegalStateException("bean '" + name + "' has @Idempotent methods but is not proxied with"
                        + " the idempotency aspect (no AnnotationAwareAspectJAutoProxyCreator, which"
                        + " @EnableAspectJAutoProxy registers, or the bean was created before it), so its calls"
                        + " would run without a claim");
            }
        }
    }

    private static boolean isAdvisedByThisAspect(Object bean) {
        if (bean instanceof Advised) {
            for (Advisor advisor : ((Advised) bean).getAdvisors()) {
                Advice advice = advisor.getAdvice();
                if (advice instanceof AbstractAspectJAdvice && IdempotencyAspect.class.isAssignableFrom(
                        ((AbstractAspectJAdvice) advice).getAspectJAdviceMethod().getDeclaringClass())) {
                    return true;
                }
            }
        }
        return false;
    }

    private void checkDeclaration(Method method) {
        if (checkedMethods.containsKey(method)) {
            return;
        }
        ReplayableReturnType.check(mapper, method);
        checkedMethods.put(method, Boolean.TRUE);
    }

    @Around("@annotation(idempotent)")
    public Object around(ProceedingJoinPoint call, Idempotent idempotent) throws Throwable {
        Method method = AopUtils.getMostSpecificMethod(((MethodSignature) call.getSignature()).getMethod(),
                                                       AopUtils.getTargetClass(call.getTarget()));
        checkDeclaration(method);
        Request req = request(call, method, idempotent);
        return req.lease == null ? inTransaction(call, method, idempotent, req)
                                 : leased(call, method, idempotent, req);
    }

    /** Claim, method and outcome on the transaction's connection: one commit or one rollback. */
    private Object inTransaction(ProceedingJoinPoint call, Method method, Idempotent idempotent, Request req)
            throws Throwable {
        if (!TransactionSynchronizationManager.isActualTransactionActive()) {
            throw new IllegalStateException("@Idempotent " + method.getName() + ": no transaction is active;"
                    + " annotate the method @Transactional and order transactions before the idempotency aspect,"
                    + " e.g. @EnableTransactionManagement(order = 0), or give it a lease");
        }
        Connection con = DataSourceUtils.getConnection(dataSource);
        try {
            if (!DataSourceUtils.isConnectionTransactional(con, dataSource)) {
                throw new IllegalStateException("@Idempotent " + method.getName() + ": the active transaction"
                        + " is not on the aspect's DataSource; give it the DataSource the transaction manager uses");
            }
            Claim claim = records.claim(con, req);
            if (!"claimed".equals(claim.outcome)) {
                return answer(claim, method, idempotent, req);
            }
            // a stored failure undoes the method's writes, not the claim
            Savepoint beforeMethod = idempotent.storeFailures().length > 0 ? con.setSavepoint() : null;
            Object value;
            try {
                value = call.proceed();
            } catch (Throwable ex) {
                if (beforeMethod != null && isStored(ex, idempotent)) {
                    refuseIfRolledBack(ex, method, call.getTarget());
                    con.rollback(beforeMethod);
                    records.fail(con, req, failureJson(ex), false, null);
                } else {
                    // the final outcome, in the transaction of the method's writes: if it commits anyway
                    // (a checked exception, noRollbackFor, a caller that catches), a retry replays the
                    // failure instead of repeating the writes; if it rolls back, the key is free again
                    suppressed(ex, () -> records.fail(con, req, failureJson(ex), false, null));
                }
                throw ex;
            }
            records.finish(con, req, toJson(value), null);
            return value;
        } finally {
            DataSourceUtils.releaseConnection(con, dataSource);
        }
    }

    /**
     * The claim commits on its own connection before the method runs; the
     * outcome is recorded with the fence, in the caller's transaction when
     * there is one (with the writes of that phase), else on its own.
     */
    private Object leased(ProceedingJoinPoint call, Method method, Idempotent idempotent, Request req)
            throws Throwable {
        Claim claim = autocommit(req, con -> records.claim(con, req));
        if (!"claimed".equals(claim.outcome)) {
            return answer(claim, method, idempotent, req);
        }
        IdempotencyLease lease = new IdempotencyLease(this, req, claim.fence, claim.recoveryPoint);
        IdempotencyLease outer = IdempotencyLease.swap(lease);
        Object value;
        try {
            value = call.proceed();
        } catch (Throwable ex) {
            if (!lease.isUnknown()) {
                String error = failureJson(ex);
                Runnable release = () -> autocommit(req, con -> {
                    records.fail(con, req, error, !isStored(ex, idempotent), claim.fence);
                    return null;
                });
                if (isStored(ex, idempotent) || !inTransactionOnDataSource()) {
                    suppressed(ex, release);
                } else {
                    failWithTheWrites(ex, req, error, claim.fence, release);
                }
            }
            throw ex;
        } finally {
            IdempotencyLease.swap(outer);
        }
        Connection con = DataSourceUtils.getConnection(dataSource);
        try {
            records.finish(con, req, toJson(value), claim.fence);
        } finally {
            DataSourceUtils.releaseConnection(con, dataSource);
        }
        return value;
    }

    private boolean inTransactionOnDataSource() {
        return TransactionSynchronizationManager.isSynchronizationActive()
                && TransactionSynchronizationManager.isActualTransactionActive()
                && TransactionSynchronizationManager.hasResource(dataSource);
    }

    /**
     * A leased method threw inside a transaction on the aspect's DataSource:
     * the failure is its final outcome in that transaction, so that writes
     * the transaction commits anyway are never left with a free key; if the
     * transaction rolls back instead, the key is released at once.
     */
    private void failWithTheWrites(Throwable ex, Request req, String error, long fence, Runnable release) {
        Connection con = DataSourceUtils.getConnection(dataSource);
        try {
            records.fail(con, req, error, false, fence);
        } catch (RuntimeException e) {
            ex.addSuppressed(e);
        } finally {
            DataSourceUtils.releaseConnection(con, dataSource);
        }
        TransactionSynchronizationManager.registerSynchronization(new ReleaseUnlessCommitted(release));
    }

    /** (TransactionSynchronizationAdapter is gone from Spring 6: every method spelled out for Spring 4.3.) */
    private static final class ReleaseUnlessCommitted implements TransactionSynchronization {
        private final Runnable release;

        ReleaseUnlessCommitted(Runnable release) {
            this.release = release;
        }

        @Override
        public void afterCompletion(int status) {
            if (status != STATUS_COMMITTED) {
                release.run();
            }
        }

        @Override
        public void suspend() {
        }

        @Override
        public void resume() {
        }

        @Override
        public void flush() {
        }

        @Override
        public void beforeCommit(boolean readOnly) {
        }

        @Override
        public void beforeCompletion() {
        }

        @Override
        public void afterCommit() {
        }
    }

    /** replay: the stored value or failure; in_progress: the exception carrying retryAfter. */
    private Object answer(Claim claim, Method method, Idempotent idempotent, Request req) throws Throwable {
        if ("in_progress".equals(claim.outcome)) {
            throw new IdempotencyInProgressException(req.key, req.scope, claim.retryAfter);
        }
        if ("failed".equals(claim.status)) {
            throw replayedFailure(claim.result, method, idempotent, req);
        }
        JavaType type = mapper.getTypeFactory().constructType(method.getGenericReturnType());
        return claim.result == null || type.getRawClass() == void.class ? null : mapper.readValue(claim.result, type);
    }

    /**
     * A stored failure as its own exception type again, if that type is
     * listed in storeFailures or declared by the method's throws clause, and
     * takes a message.
     */
    private Throwable replayedFailure(String error, Method method, Idempotent idempotent, Request req) {
        List<Class<? extends Throwable>> replayable = new ArrayList<>(Arrays.asList(idempotent.storeFailures()));
        for (Class<?> thrown : method.getExceptionTypes()) {
            replayable.add(thrown.asSubclass(Throwable.class));
        }
        try {
            JsonNode node = mapper.readTree(error);
            String type = node.path("exception").asText(null);
            String message = node.path("message").isNull() ? null : node.path("message").asText(null);
            for (Class<? extends Throwable> declared : replayable) {
                if (isSubtypeNamed(declared, type)) {
                    Class<?> cls = Class.forName(type, false, declared.getClassLoader());
                    Constructor<?> ctor = cls.getConstructor(String.class);
                    return (Throwable) ctor.newInstance(message);
                }
            }
        } catch (ReflectiveOperationException | IOException | LinkageError e) {
            // not re-creatable: fall through to the generic replay
        }
        return new IdempotentFailureException(req.key, req.scope, error);
    }

    private static boolean isSubtypeNamed(Class<? extends Throwable> declared, String type) {
        try {
            return type != null && declared.isAssignableFrom(Class.forName(type, false, declared.getClassLoader()));
        } catch (ClassNotFoundException e) {
            return false;
        }
    }

    /**
     * A stored failure is kept only if the transaction commits: refuse
     * loudly when the method's own @Transactional would roll it back.
     */
    private void refuseIfRolledBack(Throwable ex, Method method, Object target) {
        TransactionAttribute attribute =
                transactionAttributes.getTransactionAttribute(method, AopUtils.getTargetClass(target));
        if (attribute != null && attribute.rollbackOn(ex)) {
            throw new IllegalStateException("@Idempotent " + method.getName() + ": storeFailures lists "
                    + ex.getClass().getName() + " but @Transactional rolls back on it, which would drop the stored"
                    + " failure; add it to noRollbackFor", ex);
        }
    }

    private static boolean isStored(Throwable ex, Idempotent idempotent) {
        for (Class<? extends Throwable> type : idempotent.storeFailures()) {
            if (type.isInstance(ex)) {
                return true;
            }
        }
        return false;
    }

    private String failureJson(Throwable ex) {
        Map<String, String> error = new LinkedHashMap<>();
        error.put("exception", ex.getClass().getName());
        error.put("message", ex.getMessage());
        return toJson(error);
    }

    /**
     * Records the outcome of a method that threw. If that fails too (the
     * transaction is already aborted and will roll back, which frees the key
     * as well), the caller still sees the method's exception.
     */
    private static void suppressed(Throwable ex, Runnable record) {
        try {
            record.run();
        } catch (RuntimeException e) {
            ex.addSuppressed(e);
        }
    }

    private Request request(ProceedingJoinPoint call, Method method, Idempotent idempotent) {
        MethodBasedEvaluationContext context =
                new MethodBasedEvaluationContext(call.getTarget(), method, call.getArgs(), parameterNames);
        Object key = evaluate(idempotent.key(), context);
        if (key == null || key.toString().isEmpty()) {
            throw new IllegalArgumentException("@Idempotent " + method.getName() + ": the key \""
                    + idempotent.key() + "\" is null or empty");
        }
        // refused before anything is claimed: a scope that gives nothing would share one scope among all callers
        Object scope = idempotent.scope().isEmpty() ? null : evaluate(idempotent.scope(), context);
        if (scope == null || scope.toString().isEmpty()) {
            throw new IdempotencyScopeMissingException(key.toString(), idempotent.scope());
        }
        Object fingerprint = idempotent.fingerprint().isEmpty() ? call.getArgs()
                : evaluate(idempotent.fingerprint(), context);
        return new Request(key.toString(), scope.toString(),
                           fingerprint == null ? null : toJson(fingerprint),
                           emptyToNull(idempotent.ttl()), emptyToNull(idempotent.lease()));
    }

    private Object evaluate(String expression, MethodBasedEvaluationContext context) {
        return expressions.computeIfAbsent(expression, parser::parseExpression).getValue(context);
    }

    private static String emptyToNull(String s) {
        return s.isEmpty() ? null : s;
    }

    String toJson(Object value) {
        try {
            return mapper.writeValueAsString(value);
        } catch (IOException e) {
            throw new IllegalArgumentException("@Idempotent: cannot serialize " + value.getClass().getName(), e);
        }
    }

    IdempotencyRecords records() {
        return records;
    }

    interface ConnectionWork<T> {
        T run(Connection con);
    }

    /** Work committed at once on a pooled connection of its own, whatever transaction the thread is in. */
    <T> T autocommit(Request req, ConnectionWork<T> work) {
        try (Connection con = dataSource.getConnection()) {
            if (!con.getAutoCommit()) {
                con.setAutoCommit(true);
            }
            return work.run(con);
        } catch (SQLException e) {
            // the pool cannot connect (or closing the connection failed): the database is unavailable
            throw new IdempotencyUnavailableException(req.key, req.scope, e);
        }
    }
}
