package io.idempotency.spring;

import java.time.Duration;

/** One answer of idem_claim: outcome, status, the stored result or error, fence, recovery point, retry_after. */
final class Claim {
    final String outcome;
    final String status;
    final String result;
    final Long fence;
    final String recoveryPoint;
    final Duration retryAfter;

    Claim(String outcome, String status, String result, Long fence, String recoveryPoint, Duration retryAfter) {
        this.outcome = outcome;
        this.status = status;
        this.result = result;
        this.fence = fence;
        this.recoveryPoint = recoveryPoint;
        this.retryAfter = retryAfter;
    }
}
