package io.idempotency.spring.example;

import java.util.concurrent.atomic.AtomicInteger;

import io.idempotency.spring.IdempotencyLease;

/**
 * Stands for the outside system a payment calls; tests count its calls and
 * make it fail or block.
 */
public class PaymentProvider {

    /** What a charge does besides counting: fail, block, checkpoint. */
    public interface Behaviour {
        void charge(PaymentRequest req, IdempotencyLease lease) throws Exception;
    }

    public final AtomicInteger charges = new AtomicInteger();
    public volatile Behaviour behaviour = (req, lease) -> { };
    public volatile boolean unavailable;
    /** The payment ends its own database session (pg_terminate_backend from another connection). */
    public volatile boolean endSession;

    /** A charge that fails with a checked exception while unavailable is set. */
    public void chargeOrUnavailable(PaymentRequest req) throws ProviderUnavailableException {
        charges.incrementAndGet();
        if (unavailable) {
            throw new ProviderUnavailableException("provider unavailable");
        }
    }

    public void charge(PaymentRequest req, IdempotencyLease lease) {
        charges.incrementAndGet();
        try {
            behaviour.charge(req, lease);
        } catch (RuntimeException e) {
            throw e;
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }
}
