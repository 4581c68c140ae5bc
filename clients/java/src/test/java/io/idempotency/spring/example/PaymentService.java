package io.idempotency.spring.example;

import java.util.List;

/** The service the tests and the benchmark call through its Spring proxy. */
public interface PaymentService {

    /** Inserts one payment row, returns its id. */
    long pay(PaymentRequest req);

    /** As pay, but the provider is charged after the insert and may throw. */
    long payThroughProvider(PaymentRequest req);

    /** As payThroughProvider, but the provider fails with a checked exception (the transaction commits). */
    long payThroughUnavailableProvider(PaymentRequest req) throws ProviderUnavailableException;

    /** Declines amounts over 1000 with CardDeclinedException, stored as a final failure. */
    long payOrDecline(PaymentRequest req);

    /** As payOrDecline, but its @Transactional lacks noRollbackFor: refused when it declines. */
    long payOrDeclineWithoutNoRollbackFor(PaymentRequest req);

    /** As pay, but while provider.endSession is set it ends its own database session after the insert. */
    long payAndMaybeEndTheSession(PaymentRequest req);

    /** Returns the receipt lines (a generic return type). */
    List<Receipt> payWithReceipt(PaymentRequest req);

    /** @Idempotent without @Transactional: refused. */
    long payWithoutTransaction(PaymentRequest req);

    /** As pay, with the scope passed in by the caller (the authenticated principal's name). */
    long payInScope(String account, PaymentRequest req);

    /** Calls its own pay twice through this: Spring AOP does not advise such calls. */
    long payTwiceThroughThis(PaymentRequest req);

    /** A leased payment: the provider is charged under the lease, the row carries the fence. */
    long payLeased(PaymentRequest req);

    /** As payLeased, but the provider fails with a checked exception after the insert (the transaction commits). */
    long payLeasedThroughUnavailableProvider(PaymentRequest req) throws ProviderUnavailableException;
}
