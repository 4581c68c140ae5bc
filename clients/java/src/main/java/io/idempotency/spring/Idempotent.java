package io.idempotency.spring;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Runs a method at most once per idempotency key: the first call claims the
 * key in the method's transaction and stores the return value with it; a
 * duplicate gets that value back without the method running.
 *
 * <p>Expressions are SpEL over the method's arguments ({@code #req},
 * {@code #p0}, {@code #root.methodName}); compile with {@code -parameters}
 * (or debug information) to use argument names.
 */
@Target(ElementType.METHOD)
@Retention(RetentionPolicy.RUNTIME)
@Documented
public @interface Idempotent {

    /** The idempotency key, a SpEL expression; must give a non-empty value. */
    String key();

    /**
     * The scope, a SpEL expression: the authenticated principal the
     * application established (passed in as an argument, {@code #account}),
     * or an explicit constant ({@code "'checkout'"}) for one shared scope;
     * never a value the caller chooses. The same key in two scopes is two
     * keys. An expression that gives null or "" is refused with
     * {@link IdempotencyScopeMissingException} before anything is claimed.
     */
    String scope();

    /**
     * What makes two requests "the same", a SpEL expression whose value is
     * fingerprinted as JSON; "" fingerprints all arguments, an expression
     * that gives null stores no fingerprint. A duplicate with another
     * fingerprint gets {@link IdempotencyKeyReusedException}.
     */
    String fingerprint() default "";

    /** How long the record answers duplicates, a PostgreSQL interval ("1 day"); "" is idempotency.default_ttl. */
    String ttl() default "";

    /**
     * A PostgreSQL interval ("30 seconds") for a leased claim: the claim
     * commits on its own connection before the method runs, the method sees
     * its fence through {@link IdempotencyLease#current()}. "" is an
     * in-transaction claim.
     */
    String lease() default "";

    /**
     * Exception types stored as final failures: a duplicate gets the same
     * exception type and message again without the method running. Other
     * exceptions release the key.
     */
    Class<? extends Throwable>[] storeFailures() default {};
}
