package io.idempotency.spring.bench;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.reflect.Method;
import java.util.UUID;

import org.aspectj.lang.ProceedingJoinPoint;
import org.aspectj.lang.annotation.Around;
import org.aspectj.lang.annotation.Aspect;
import org.aspectj.lang.reflect.MethodSignature;
import org.springframework.aop.support.AopUtils;
import org.springframework.context.expression.MethodBasedEvaluationContext;
import org.springframework.core.DefaultParameterNameDiscoverer;
import org.springframework.core.Ordered;
import org.springframework.expression.spel.standard.SpelExpressionParser;

/**
 * The lock aspect of the design write-ups, done right as a lock: a random
 * token per holder, SET key token NX PX ttl, and a Lua compare-and-delete
 * so that a holder whose lock expired does not delete the next holder's.
 * Ordered outside the transaction, so the unlock comes after the commit.
 */
@Aspect
public class RedisLockAspect implements Ordered {

    private static final String UNLOCK =
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

    private final String host;
    private final int port;
    private final ThreadLocal<RespClient> clients = new ThreadLocal<>();
    private final SpelExpressionParser parser = new SpelExpressionParser();
    private final DefaultParameterNameDiscoverer names = new DefaultParameterNameDiscoverer();

    public RedisLockAspect(String host, int port) {
        this.host = host;
        this.port = port;
    }

    @Override
    public int getOrder() {
        return -1;   // before the transaction advice (order 0)
    }

    @Around("@annotation(locked)")
    public Object around(ProceedingJoinPoint call, RedisLocked locked) throws Throwable {
        Method method = AopUtils.getMostSpecificMethod(((MethodSignature) call.getSignature()).getMethod(),
                                                       AopUtils.getTargetClass(call.getTarget()));
        String key = "lock:" + parser.parseExpression(locked.key())
                .getValue(new MethodBasedEvaluationContext(call.getTarget(), method, call.getArgs(), names));
        String token = UUID.randomUUID().toString();
        RespClient redis = client();
        if (redis.call("SET", key, token, "NX", "PX", Long.toString(locked.ttlMillis())) == null) {
            throw new LockBusyException(key);
        }
        try {
            return call.proceed();
        } finally {
            redis.call("EVAL", UNLOCK, "1", key, token);
        }
    }

    private RespClient client() {
        RespClient c = clients.get();
        if (c == null) {
            try {
                c = new RespClient(host, port);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            clients.set(c);
        }
        return c;
    }
}
