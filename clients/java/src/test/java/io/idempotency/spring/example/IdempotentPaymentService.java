package io.idempotency.spring.example;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.Arrays;
import java.util.List;

import io.idempotency.spring.Idempotent;
import io.idempotency.spring.IdempotencyLease;

import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.annotation.Transactional;

/**
 * The payment service of the tests and its variants. Its scope is
 * PaymentRequest's account, which here stands for the authenticated
 * principal the server set; an application takes the scope from its own
 * authentication, never from the request body (the README's example).
 */
public class IdempotentPaymentService implements PaymentService {

    private final JdbcTemplate jdbc;
    private final PaymentProvider provider;

    public IdempotentPaymentService(JdbcTemplate jdbc, PaymentProvider provider) {
        this.jdbc = jdbc;
        this.provider = provider;
    }

    @Override
    @Transactional
    @Idempotent(key = "#req.requestId", scope = "#req.account")
    public long pay(PaymentRequest req) {
        return insert(req, null);
    }

    @Override
    @Transactional
    @Idempotent(key = "#req.requestId", scope = "#req.account")
    public long payThroughProvider(PaymentRequest req) {
        long id = insert(req, null);
        provider.charge(req, null);
        return id;
    }

    @Override
    @Transactional
    @Idempotent(key = "#req.requestId", scope = "#req.account")
    public long payThroughUnavailableProvider(PaymentRequest req) throws ProviderUnavailableException {
        long id = insert(req, null);
        provider.chargeOrUnavailable(req);
        return id;
    }

    @Override
    @Transactional(noRollbackFor = CardDeclinedException.class)
    @Idempotent(key = "#req.requestId", scope = "#req.account", storeFailures = CardDeclinedException.class)
    public long payOrDecline(PaymentRequest req) {
        return insertOrDecline(req);
    }

    @Override
    @Transactional
    @Idempotent(key = "#req.requestId", scope = "#req.account", storeFailures = CardDeclinedException.class)
    public long payOrDeclineWithoutNoRollbackFor(PaymentRequest req) {
        return insertOrDecline(req);
    }

    private long insertOrDecline(PaymentRequest req) {
        long id = insert(req, null);
        provider.charge(req, null);
        if (req.getAmount() > 1000) {
            throw new CardDeclinedException("card declined: " + req.getAmount() + " is over the limit of 1000");
        }
        return id;
    }

    @Override
    @Transactional
    @Idempotent(key = "#req.requestId", scope = "#req.account")
    public long payAndMaybeEndTheSession(PaymentRequest req) {
        long id = insert(req, null);
        if (provider.endSession) {
            int pid = jdbc.queryForObject("SELECT pg_backend_pid()", Integer.class);
            try (Connection other = jdbc.getDataSource().getConnection();
                 PreparedStatement end = other.prepareStatement("SELECT pg_terminate_backend(?, 60000)")) {
                end.setInt(1, pid);     // waits until the backend has exited
                end.executeQuery().close();
            } catch (SQLException e) {
                throw new IllegalStateException(e);
            }
        }
        return id;
    }

    @Override
    @Transactional
    @Idempotent(key = "#req.requestId", scope = "#req.account")
    public List<Receipt> payWithReceipt(PaymentRequest req) {
        long id = insert(req, null);
        return Arrays.asList(new Receipt(id, "amount " + req.getAmount()), new Receipt(id, "fee 0"));
    }

    @Override
    @Idempotent(key = "#req.requestId", scope = "#req.account")
    public long payWithoutTransaction(PaymentRequest req) {
        return insert(req, null);
    }

    @Override
    @Transactional
    @Idempotent(key = "#req.requestId", scope = "#account")
    public long payInScope(String account, PaymentRequest req) {
        provider.charge(req, null);
        return insert(req, null);
    }

    @Override
    @Transactional
    public long payTwiceThroughThis(PaymentRequest req) {
        pay(req);
        return pay(req);
    }

    @Override
    @Transactional
    @Idempotent(key = "#req.requestId", scope = "#req.account", lease = "1 hour")
    public long payLeased(PaymentRequest req) {
        IdempotencyLease lease = IdempotencyLease.current();
        // a call that took the key over after the charge does not charge again
        if (!"charged".equals(lease.getRecoveryPoint())) {
            provider.charge(req, lease);
        }
        return insert(req, lease.getFence());
    }

    @Override
    @Transactional
    @Idempotent(key = "#req.requestId", scope = "#req.account", lease = "1 hour")
    public long payLeasedThroughUnavailableProvider(PaymentRequest req) throws ProviderUnavailableException {
        long id = insert(req, IdempotencyLease.current().getFence());
        provider.chargeOrUnavailable(req);
        return id;
    }

    private long insert(PaymentRequest req, Long fence) {
        return jdbc.queryForObject("INSERT INTO payment (request_id, account, amount, fence) VALUES (?, ?, ?, ?)"
                + " RETURNING id", Long.class, req.getRequestId(), req.getAccount(), req.getAmount(), fence);
    }
}
