package io.idempotency.spring.bench;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * The annotation of the lock pattern the extension replaces: a Redis lock
 * on a SpEL key while the method runs (SET NX PX, then a compare-and-delete
 * script). A lock, not idempotency: a duplicate that comes after the unlock
 * runs the method again.
 */
@Target(ElementType.METHOD)
@Retention(RetentionPolicy.RUNTIME)
public @interface RedisLocked {
    String key();

    long ttlMillis() default 30000;
}
