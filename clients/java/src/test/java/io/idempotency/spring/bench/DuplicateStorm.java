package io.idempotency.spring.bench;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;

import io.idempotency.spring.IdempotencyInProgressException;
import io.idempotency.spring.example.PaymentRequest;
import io.idempotency.spring.example.PaymentTable;

import org.springframework.context.annotation.AnnotationConfigApplicationContext;
import org.springframework.jdbc.core.JdbcTemplate;

/**
 * make bench's Spring row: the same payment service under the Redis lock
 * aspect and under @Idempotent, in a duplicate storm (every request sent
 * SENDS times, shuffled, by THREADS threads; a call refused as busy is sent
 * again, as a client retries a 409). Prints per mode: answered calls per
 * second and duplicate payments (rows beyond one per request).
 *
 *   DuplicateStorm JDBC_URL REDIS_PORT [REQUESTS [SENDS [THREADS]]]
 */
public final class DuplicateStorm {

    private DuplicateStorm() {
    }

    public static void main(String[] args) throws Exception {
        System.setProperty("idempotency.jdbcUrl", args[0]);
        System.setProperty("idempotency.redisPort", args[1]);
        int requests = args.length > 2 ? Integer.parseInt(args[2]) : 2000;
        int sends = args.length > 3 ? Integer.parseInt(args[3]) : 5;
        int threads = args.length > 4 ? Integer.parseInt(args[4]) : 16;
        try (AnnotationConfigApplicationContext context = new AnnotationConfigApplicationContext(StormApplication.class)) {
            JdbcTemplate jdbc = context.getBean(JdbcTemplate.class);
            PaymentTable.create(jdbc);
            StormPayments locked = context.getBean("lockedPayments", StormPayments.class);
            StormPayments idempotent = context.getBean("idempotentPayments", StormPayments.class);
            // warm up both paths (JIT, pools) before measuring
            storm(locked, jdbc, requests / 10, sends, threads);
            storm(idempotent, jdbc, requests / 10, sends, threads);
            System.out.println("redis_lock " + storm(locked, jdbc, requests, sends, threads));
            System.out.println("idempotent " + storm(idempotent, jdbc, requests, sends, threads));
        }
    }

    private static String storm(StormPayments service, JdbcTemplate jdbc, int requests, int sends, int threads)
            throws Exception {
        String run = "storm-" + UUID.randomUUID() + "-";
        List<PaymentRequest> calls = new ArrayList<>();
        for (int r = 0; r < requests; r++) {
            PaymentRequest req = new PaymentRequest(run + r, "acct_" + (r % 10), 100 + r);
            for (int s = 0; s < sends; s++) {
                calls.add(req);
            }
        }
        Collections.shuffle(calls);
        AtomicLong busy = new AtomicLong();
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        CountDownLatch go = new CountDownLatch(1);
        List<Future<?>> done = new ArrayList<>();
        for (PaymentRequest req : calls) {
            done.add(pool.submit(() -> {
                go.await();
                while (true) {
                    try {
                        return service.pay(req);
                    } catch (LockBusyException | IdempotencyInProgressException e) {
                        busy.incrementAndGet();
                        Thread.sleep(1);
                    }
                }
            }));
        }
        long start = System.nanoTime();
        go.countDown();
        for (Future<?> f : done) {
            f.get();
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        pool.shutdown();
        long duplicates = jdbc.queryForObject("SELECT count(*) - count(DISTINCT request_id) FROM payment"
                + " WHERE request_id LIKE ?", Long.class, run + "%");
        return String.format("calls_per_s %.0f duplicates %d busy %d calls %d",
                             calls.size() / seconds, duplicates, busy.get(), calls.size());
    }
}
