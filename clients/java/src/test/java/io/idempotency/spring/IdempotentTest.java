package io.idempotency.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import io.idempotency.spring.example.CardDeclinedException;
import io.idempotency.spring.example.ObjectReturningService;
import io.idempotency.spring.example.PaymentApplication;
import io.idempotency.spring.example.PaymentBeans;
import io.idempotency.spring.example.PaymentProvider;
import io.idempotency.spring.example.PaymentRequest;
import io.idempotency.spring.example.PaymentService;
import io.idempotency.spring.example.PaymentTable;
import io.idempotency.spring.example.ProviderUnavailableException;
import io.idempotency.spring.example.Receipt;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.context.annotation.AnnotationConfigApplicationContext;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.TransactionSystemException;
import org.springframework.transaction.support.TransactionTemplate;

/** @Idempotent against the real PostgreSQL of make test, with the extension. */
class IdempotentTest {

    private AnnotationConfigApplicationContext context;
    private PaymentService payments;
    private PaymentProvider provider;
    private JdbcTemplate jdbc;

    @BeforeEach
    void start() {
        startContext();
        PaymentTable.create(jdbc);
    }

    private void startContext() {
        context = new AnnotationConfigApplicationContext(PaymentApplication.class);
        payments = context.getBean(PaymentService.class);
        provider = context.getBean(PaymentProvider.class);
        jdbc = context.getBean(JdbcTemplate.class);
    }

    @AfterEach
    void stop() {
        context.close();
    }

    private static String newKey(String what) {
        return what + "-" + UUID.randomUUID();
    }

    private int rows(String key) {
        return jdbc.queryForObject("SELECT count(*) FROM payment WHERE request_id = ?", Integer.class, key);
    }

    private int records(String key, String scope) {
        return jdbc.queryForObject("SELECT count(*) FROM idem_lookup(?, ?)", Integer.class, key, scope);
    }

    @Test
    void duplicateStormMakesOnePaymentPerKeyAndEveryCallerGetsItsId() throws Exception {
        int keys = 40;
        int sends = 5;
        List<PaymentRequest> requests = new ArrayList<>();
        for (int k = 0; k < keys; k++) {
            PaymentRequest req = new PaymentRequest(newKey("storm"), "acct_42", 100 + k);
            for (int s = 0; s < sends; s++) {
                requests.add(req);
            }
        }
        Collections.shuffle(requests);
        Map<String, Set<Long>> answers = new ConcurrentHashMap<>();
        ExecutorService pool = Executors.newFixedThreadPool(16);
        CountDownLatch go = new CountDownLatch(1);
        List<Future<?>> calls = new ArrayList<>();
        for (PaymentRequest req : requests) {
            calls.add(pool.submit(() -> {
                go.await();
                long id = payments.pay(req);
                answers.computeIfAbsent(req.getRequestId(), k -> ConcurrentHashMap.newKeySet()).add(id);
                return null;
            }));
        }
        go.countDown();
        for (Future<?> call : calls) {
            call.get();
        }
        pool.shutdown();
        assertEquals(keys, answers.size());
        for (Map.Entry<String, Set<Long>> answer : answers.entrySet()) {
            assertEquals(1, answer.getValue().size(), "callers of " + answer.getKey() + " got " + answer.getValue());
            assertEquals(1, rows(answer.getKey()), "payment rows of " + answer.getKey());
            long stored = jdbc.queryForObject("SELECT id FROM payment WHERE request_id = ?", Long.class,
                                              answer.getKey());
            assertEquals(stored, (long) answer.getValue().iterator().next());
        }
    }

    @Test
    void aMethodThatThrowsLeavesNothingAndTheRetryRuns() {
        PaymentRequest req = new PaymentRequest(newKey("flaky"), "acct_42", 250);
        provider.behaviour = (r, lease) -> {
            throw new IllegalStateException("provider timed out");
        };
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> payments.payThroughProvider(req));
        assertEquals("provider timed out", e.getMessage());
        assertEquals(0, rows(req.getRequestId()));
        assertEquals(0, records(req.getRequestId(), "acct_42"));

        provider.behaviour = (r, lease) -> { };
        long id = payments.payThroughProvider(req);
        assertEquals(1, rows(req.getRequestId()));
        assertEquals(id, payments.payThroughProvider(req));
        assertEquals(2, provider.charges.get(), "the replay did not run the method");
        assertEquals(1, rows(req.getRequestId()));
    }

    /** The provider's checked exception after the insert, when the method's transaction commits anyway. */
    interface UnavailableProviderCall {
        long pay(PaymentRequest req) throws ProviderUnavailableException;
    }

    private void assertTheCommittedFailureIsReplayed(PaymentRequest req, UnavailableProviderCall call) {
        provider.unavailable = true;
        // @Transactional commits on a checked exception: the caller sees the exception, not IK004 at commit
        ProviderUnavailableException first = assertThrows(ProviderUnavailableException.class, () -> call.pay(req));
        assertEquals(1, rows(req.getRequestId()), "the method's write committed, as @Transactional decides");
        assertEquals("failed", jdbc.queryForObject("SELECT status::text FROM idem_lookup(?, ?)", String.class,
                                                   req.getRequestId(), "acct_42"), "its failure committed with it");

        // the retry must not repeat the committed write: it gets the same exception, the method does not run
        provider.unavailable = false;
        ProviderUnavailableException again = assertThrows(ProviderUnavailableException.class, () -> call.pay(req));
        assertEquals(first.getMessage(), again.getMessage());
        assertEquals(1, rows(req.getRequestId()), "one write, as the first call committed it");
        assertEquals(1, provider.charges.get(), "the replay did not run the method");
    }

    @Test
    void aCheckedExceptionThatCommitsIsStoredWithTheWritesAndReplayed() {
        assertTheCommittedFailureIsReplayed(new PaymentRequest(newKey("checked"), "acct_42", 260),
                                            payments::payThroughUnavailableProvider);
    }

    @Test
    void aCallerTransactionThatRollsBackFreesTheKey() {
        PaymentRequest req = new PaymentRequest(newKey("rollback"), "acct_42", 300);
        TransactionTemplate caller = new TransactionTemplate(context.getBean(PlatformTransactionManager.class));
        long rolledBack = caller.execute(status -> {
            long id = payments.pay(req);
            status.setRollbackOnly();   // the caller's own reason, after the method returned
            return id;
        });
        assertEquals(0, rows(req.getRequestId()));
        assertEquals(0, records(req.getRequestId(), "acct_42"));

        long id = payments.pay(req);
        assertTrue(id != rolledBack, "the retry ran the method again");
        assertEquals(id, payments.pay(req));
        assertEquals(1, rows(req.getRequestId()));
    }

    @Test
    void aSessionThatEndsBeforeTheOutcomeLeavesNothingAndTheRetryRunsOnce() {
        PaymentRequest req = new PaymentRequest(newKey("session-ended"), "acct_42", 310);
        provider.endSession = true;
        TransactionSystemException e = assertThrows(TransactionSystemException.class,
                () -> payments.payAndMaybeEndTheSession(req));
        assertInstanceOf(IdempotencyUnavailableException.class, e.getApplicationException(),
                         "the aspect's idem_finish met the ended session");
        assertEquals(0, rows(req.getRequestId()));
        assertEquals(0, records(req.getRequestId(), "acct_42"));

        provider.endSession = false;
        long id = payments.payAndMaybeEndTheSession(req);
        assertEquals(id, payments.payAndMaybeEndTheSession(req));
        assertEquals(1, rows(req.getRequestId()));
    }

    @Test
    void theSameKeyWithAnotherRequestIsRefused() {
        String key = newKey("fingerprint");
        long id = payments.pay(new PaymentRequest(key, "acct_42", 100));
        IdempotencyKeyReusedException e = assertThrows(IdempotencyKeyReusedException.class,
                () -> payments.pay(new PaymentRequest(key, "acct_42", 200)));
        assertEquals(key, e.getKey());
        assertEquals("acct_42", e.getScope());
        assertEquals("IK001", ((SQLException) e.getCause()).getSQLState());
        assertEquals(1, rows(key));
        assertEquals(id, payments.pay(new PaymentRequest(key, "acct_42", 100)));
    }

    @Test
    void aStoredValueIsReplayedAfterTheApplicationRestarts() {
        PaymentRequest req = new PaymentRequest(newKey("restart"), "acct_42", 400);
        List<Receipt> receipt = payments.payWithReceipt(req);
        context.close();
        startContext();
        List<Receipt> replayed = payments.payWithReceipt(req);
        assertEquals(receipt, replayed);
        assertInstanceOf(Receipt.class, replayed.get(0), "replayed as the method's generic return type");
        assertEquals(1, rows(req.getRequestId()));
    }

    @Test
    void aStoredFailureIsReplayedAsTheSameException() {
        PaymentRequest req = new PaymentRequest(newKey("declined"), "acct_42", 5000);
        CardDeclinedException first = assertThrows(CardDeclinedException.class, () -> payments.payOrDecline(req));
        CardDeclinedException again = assertThrows(CardDeclinedException.class, () -> payments.payOrDecline(req));
        assertEquals(first.getMessage(), again.getMessage());
        assertEquals(1, provider.charges.get(), "the replay did not run the method");
        assertEquals(0, rows(req.getRequestId()), "the method's writes were undone");
        assertEquals("failed", jdbc.queryForObject("SELECT status::text FROM idem_lookup(?, ?)", String.class,
                                                   req.getRequestId(), "acct_42"));
    }

    @Test
    void aStoredFailureThatTheTransactionWouldRollBackIsRefused() {
        PaymentRequest req = new PaymentRequest(newKey("declined-rollback"), "acct_42", 5000);
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> payments.payOrDeclineWithoutNoRollbackFor(req));
        assertTrue(e.getMessage().contains("add it to noRollbackFor"), e.getMessage());
        assertInstanceOf(CardDeclinedException.class, e.getCause());
        assertEquals(0, rows(req.getRequestId()));
        assertEquals(0, records(req.getRequestId(), "acct_42"), "the claim rolled back: the key is free");
    }

    @Test
    void withoutATransactionTheCallIsRefused() {
        PaymentRequest req = new PaymentRequest(newKey("no-tx"), "acct_42", 100);
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> payments.payWithoutTransaction(req));
        assertTrue(e.getMessage().contains("no transaction is active"), e.getMessage());
        assertEquals(0, rows(req.getRequestId()));
        assertEquals(0, records(req.getRequestId(), "acct_42"));
    }

    @Test
    void aScopeThatGivesNothingIsRefusedBeforeAnythingIsClaimed() {
        for (String account : new String[] {null, ""}) {
            PaymentRequest req = new PaymentRequest(newKey("no-scope"), "acct_42", 100);
            IdempotencyScopeMissingException e = assertThrows(IdempotencyScopeMissingException.class,
                    () -> payments.payInScope(account, req), "scope " + account);
            assertEquals(req.getRequestId(), e.getKey());
            assertTrue(e.getMessage().contains("#account"), e.getMessage());
            assertEquals(0, rows(req.getRequestId()), "the method did not run");
            assertEquals(0, records(req.getRequestId(), ""), "nothing stored in the shared scope ''");
        }
        assertEquals(0, provider.charges.get());
    }

    @Test
    void aMethodDeclaredToReturnObjectIsRefusedAtStartup() {
        AnnotationConfigApplicationContext objects = new AnnotationConfigApplicationContext();
        objects.register(PaymentApplication.class, ObjectReturningService.class);
        try {
            IllegalStateException e = assertThrows(IllegalStateException.class, objects::refresh,
                    "a replay of Object would come back as a LinkedHashMap, not the Receipt returned");
            assertTrue(e.getMessage().contains("receipt") && e.getMessage().contains("java.lang.Object"),
                       e.getMessage());
        } finally {
            objects.close();
        }
    }

    @Test
    void aBeanThatTheAspectDoesNotAdviseIsRefusedAtStartup() {
        // no auto-proxy creator: the payment service is the plain object, its calls would bypass the aspect
        AnnotationConfigApplicationContext unproxied = new AnnotationConfigApplicationContext();
        unproxied.register(PaymentBeans.class);
        try {
            IllegalStateException e = assertThrows(IllegalStateException.class, unproxied::refresh);
            assertTrue(e.getMessage().contains("'paymentService' has @Idempotent methods but is not proxied"),
                       e.getMessage());
        } finally {
            unproxied.close();
        }
    }

    /**
     * Spring AOP advises calls through the proxy only: a call from the bean
     * to its own {@code @Idempotent} method runs the method without a claim
     * (the README says so). This test pins that behaviour down.
     */
    @Test
    void aCallFromTheBeanToItselfIsNotAdvised() {
        PaymentRequest req = new PaymentRequest(newKey("self"), "acct_42", 120);
        payments.payTwiceThroughThis(req);
        assertEquals(2, rows(req.getRequestId()), "both inner calls ran: neither went through the aspect");
        assertEquals(0, records(req.getRequestId(), "acct_42"), "no claim was made");
        long id = payments.pay(req);
        assertEquals(3, rows(req.getRequestId()), "the first call through the proxy runs the method");
        assertEquals(id, payments.pay(req), "and is replayed from then on");
    }

    @Test
    void aLeasedCallIsTakenOverAndTheStaleWorkerIsFencedOff() throws Exception {
        PaymentRequest req = new PaymentRequest(newKey("leased"), "acct_42", 700);
        CountDownLatch charged = new CountDownLatch(1);
        CountDownLatch resumeWorker = new CountDownLatch(1);
        AtomicReference<IdempotencyLease> workerLease = new AtomicReference<>();
        provider.behaviour = (r, lease) -> {
            if (lease.getFence() == 1) {            // the first worker charges, then stalls
                workerLease.set(lease);
                lease.checkpoint("charged");
                charged.countDown();
                resumeWorker.await();
            }
        };
        ExecutorService worker = Executors.newSingleThreadExecutor();
        Future<Long> first = worker.submit(() -> payments.payLeased(req));
        while (!charged.await(100, TimeUnit.MILLISECONDS)) {
            if (first.isDone()) {
                first.get();    // the worker failed before it charged: its exception fails the test
                throw new AssertionError("the first worker returned without charging");
            }
        }

        // its lease is live: a duplicate is told to come back
        IdempotencyInProgressException busy = assertThrows(IdempotencyInProgressException.class,
                () -> payments.payLeased(req));
        assertTrue(busy.getRetryAfter().compareTo(Duration.ZERO) > 0, "retryAfter " + busy.getRetryAfter());

        // the lease ends (as if the worker's machine stalled past it): the next call takes over
        jdbc.update("UPDATE idempotent_record SET locked_until = now() - interval '1 second'"
                + " WHERE scope = ? AND key = ?", "acct_42", req.getRequestId());
        long taken = payments.payLeased(req);
        assertEquals(Long.valueOf(2), jdbc.queryForObject("SELECT fence FROM payment WHERE id = ?", Long.class, taken));
        assertEquals(1, provider.charges.get(), "the takeover saw the recovery point and did not charge again");

        // the stale worker can neither extend its lease nor record its outcome
        assertThrows(IdempotencyLeaseLostException.class, () -> workerLease.get().extend(Duration.ofMinutes(1)));
        resumeWorker.countDown();
        ExecutionException stale = assertThrows(ExecutionException.class, () -> first.get(60, TimeUnit.SECONDS));
        assertInstanceOf(IdempotencyLeaseLostException.class, stale.getCause());
        worker.shutdown();

        assertEquals(1, rows(req.getRequestId()), "the stale worker's payment row rolled back");
        assertEquals(taken, payments.payLeased(req));
    }

    @Test
    void aLeasedCallThatThrowsReleasesTheKeyAtOnce() {
        PaymentRequest req = new PaymentRequest(newKey("leased-throws"), "acct_42", 750);
        provider.behaviour = (r, lease) -> {
            throw new IllegalStateException("provider refused the connection");
        };
        assertThrows(IllegalStateException.class, () -> payments.payLeased(req));
        assertEquals(0, rows(req.getRequestId()));

        // the hour-long lease was released, not left to run out: the retry takes the key over
        provider.behaviour = (r, lease) -> { };
        long id = payments.payLeased(req);
        assertEquals(Long.valueOf(2), jdbc.queryForObject("SELECT fence FROM payment WHERE id = ?", Long.class, id));
        assertEquals(id, payments.payLeased(req));
        assertEquals(2, provider.charges.get());
    }

    @Test
    void aLeasedCallWhoseTransactionCommitsAfterAnExceptionStoresTheFailure() {
        assertTheCommittedFailureIsReplayed(new PaymentRequest(newKey("leased-checked"), "acct_42", 760),
                                            payments::payLeasedThroughUnavailableProvider);
    }

    @Test
    void anUnknownOutcomeIsKeptForReconciliation() {
        PaymentRequest req = new PaymentRequest(newKey("unknown"), "acct_42", 800);
        provider.behaviour = (r, lease) -> {
            lease.markUnknown(Collections.singletonMap("provider", "timed out after the request was sent"));
            throw new IllegalStateException("provider timed out");
        };
        assertThrows(IllegalStateException.class, () -> payments.payLeased(req));
        assertThrows(IdempotencyInProgressException.class, () -> payments.payLeased(req));
        assertEquals(1, provider.charges.get());
        assertEquals("unknown", jdbc.queryForObject("SELECT status::text FROM idem_pending WHERE key = ?",
                                                    String.class, req.getRequestId()));
    }
}
