package io.idempotency.spring;

import java.time.Duration;
import java.time.Instant;

/**
 * The leased claim a running {@link Idempotent#lease()} method holds: its
 * fence (fencing token), the recovery point a taken-over claim inherits, and
 * the writes a worker makes while it runs. Each write commits at once on a
 * connection of its own (not in the caller's transaction), so that it
 * survives the worker; each raises {@link IdempotencyLeaseLostException}
 * once the key was taken over.
 */
public final class IdempotencyLease {

    private static final ThreadLocal<IdempotencyLease> CURRENT = new ThreadLocal<>();

    private final IdempotencyAspect aspect;
    private final Request request;
    private final long fence;
    private final String recoveryPoint;
    private volatile boolean unknown;

    IdempotencyLease(IdempotencyAspect aspect, Request request, long fence, String recoveryPoint) {
        this.aspect = aspect;
        this.request = request;
        this.fence = fence;
        this.recoveryPoint = recoveryPoint;
    }

    /** The lease of the {@link Idempotent} method running on this thread. */
    public static IdempotencyLease current() {
        IdempotencyLease lease = CURRENT.get();
        if (lease == null) {
            throw new IllegalStateException("no leased @Idempotent method is running on this thread");
        }
        return lease;
    }

    static IdempotencyLease swap(IdempotencyLease lease) {
        IdempotencyLease previous = CURRENT.get();
        if (lease == null) {
            CURRENT.remove();
        } else {
            CURRENT.set(lease);
        }
        return previous;
    }

    public String getKey() {
        return request.key;
    }

    public String getScope() {
        return request.scope;
    }

    /** 1 for a first claim, + 1 per takeover: pass it to outside systems that fence their writes. */
    public long getFence() {
        return fence;
    }

    /** The last recovery point saved for this key (also by a call whose lease ended), or null. */
    public String getRecoveryPoint() {
        return recoveryPoint;
    }

    /** Heartbeat: the lease now ends at server time + {@code lease}; returns that end. */
    public Instant extend(Duration lease) {
        return aspect.autocommit(request, con -> aspect.records().extendLease(con, request, lease, fence));
    }

    /** Saves a recovery point ("charged"): a call that takes the key over sees it. */
    public void checkpoint(String point) {
        aspect.autocommit(request, con -> {
            aspect.records().checkpoint(con, request, point, fence);
            return null;
        });
    }

    /**
     * Records that the outcome of an outside call is unknown (a timeout):
     * duplicates get {@link IdempotencyInProgressException} until a
     * reconciliation job records the outcome (idem_pending lists it). The
     * method then throws; the key is not released.
     */
    public void markUnknown(Object detail) {
        String json = aspect.toJson(detail);
        aspect.autocommit(request, con -> {
            aspect.records().markUnknown(con, request, json, fence);
            return null;
        });
        unknown = true;
    }

    boolean isUnknown() {
        return unknown;
    }
}
