package io.idempotency.spring;

import static org.junit.jupiter.api.Assertions.assertAll;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;
import org.springframework.dao.DataAccessException;

/**
 * Each SQLSTATE of the answer mapping the client packages share, as the
 * exception type an {@link Idempotent} caller gets (no database needed).
 */
class SqlStateMappingTest {

    private final IdempotencyRecords records = new IdempotencyRecords();
    private final Request request = new Request("k1", "acct_42", null, null, null);
    private final List<Executable> checks = new ArrayList<>();

    private void expect(Class<? extends RuntimeException> type, String sqlState, String message) {
        checks.add(() -> {
            SQLException cause = new SQLException(message, sqlState);
            RuntimeException e = records.translate(cause, request, "SELECT idem_claim(...)");
            assertEquals(type, e.getClass(), sqlState + " " + message);
            assertSame(cause, e.getCause(), sqlState + ": the SQLException is the cause");
        });
    }

    @Test
    void eachSqlStateGivesItsException() {
        for (String state : new String[] {"08000", "08001", "08003", "08006", "08P01", "57P01", "57P02", "57P03",
                                          "57014", "25P03", "53300"}) {
            expect(IdempotencyUnavailableException.class, state, "the session ended");
        }
        // Citus right after a shard move
        expect(IdempotencyUnavailableException.class, "25001",
               "cannot perform query on placements that were modified in this transaction");
        expect(IdempotencyUnavailableException.class, "XX000",
               "cannot execute a distributed query from a query on a shard");
        expect(IdempotencyUnavailableException.class, "XX000", "could not commit transaction for shard 102008");

        expect(IdempotencyRetryException.class, "40001", "could not serialize access");
        expect(IdempotencyRetryException.class, "40P01", "deadlock detected");
        expect(IdempotencyReadOnlyException.class, "25006", "cannot execute INSERT in a read-only transaction");
        for (String state : new String[] {"22004", "22023", "22008"}) {
            expect(IdempotencyKeyInvalidException.class, state, "idempotency key is too long");
        }
        expect(IdempotencyScopeForbiddenException.class, "42501", "permission denied for idempotency scope");
        expect(IdempotencyKeyReusedException.class, "IK001", "key was already used for a different request");
        expect(IdempotencyLeaseLostException.class, "IK002", "not the holder of the claim");
        expect(IdempotencyLeaseLostException.class, "IK003", "stale fence");
        assertAll(checks);
    }

    @Test
    void otherErrorsStaySpringDataAccessExceptions() {
        for (String[] other : new String[][] {{"25001", "leased claim inside a transaction block"},
                                              {"XX000", "some other internal error"},
                                              {"23505", "duplicate key value"}}) {
            RuntimeException e = records.translate(new SQLException(other[1], other[0]), request, "SELECT 1");
            assertFalse(e instanceof IdempotencyException, other[0] + " " + other[1] + ": " + e);
            assertTrue(e instanceof DataAccessException || e instanceof IllegalStateException,
                       other[0] + ": " + e);
        }
    }
}
