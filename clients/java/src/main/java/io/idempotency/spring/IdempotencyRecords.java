package io.idempotency.spring;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Timestamp;
import java.time.Duration;
import java.time.Instant;

import org.springframework.dao.DataAccessException;
import org.springframework.jdbc.support.SQLStateSQLExceptionTranslator;

/**
 * The extension's functions as JDBC calls on a given connection, and its
 * SQLSTATEs as exceptions. The functions are found on the connection's
 * search_path.
 */
final class IdempotencyRecords {

    private static final SQLStateSQLExceptionTranslator TRANSLATOR = new SQLStateSQLExceptionTranslator();

    Claim claim(Connection con, Request req) {
        String sql = "SELECT outcome, status::text, result::text, fence, recovery_point,"
                + " (extract(epoch FROM retry_after) * 1000)::bigint"
                + " FROM idem_claim(?, scope => ?, fingerprint => "
                + (req.fingerprintJson == null ? "NULL" : "idem_fingerprint(?::jsonb)")
                + ", ttl => ?::interval, lease => ?::interval)";
        try (PreparedStatement ps = con.prepareStatement(sql)) {
            int i = 1;
            ps.setString(i++, req.key);
            ps.setString(i++, req.scope);
            if (req.fingerprintJson != null) {
                ps.setString(i++, req.fingerprintJson);
            }
            ps.setString(i++, req.ttl);
            ps.setString(i, req.lease);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                long fence = rs.getLong(4);
                Long fenceOrNull = rs.wasNull() ? null : fence;
                long retryMs = rs.getLong(6);
                Duration retryAfter = rs.wasNull() ? null : Duration.ofMillis(retryMs);
                return new Claim(rs.getString(1), rs.getString(2), rs.getString(3), fenceOrNull,
                                 rs.getString(5), retryAfter);
            }
        } catch (SQLException e) {
            throw translate(e, req, sql);
        }
    }

    void finish(Connection con, Request req, String resultJson, Long fence) {
        execute(con, req, "SELECT idem_finish(?, ?::jsonb, scope => ?, fence => ?)",
                req.key, resultJson, req.scope, fence);
    }

    void fail(Connection con, Request req, String errorJson, boolean retryable, Long fence) {
        execute(con, req, "SELECT idem_fail(?, ?::jsonb, retryable => ?, scope => ?, fence => ?)",
                req.key, errorJson, retryable, req.scope, fence);
    }

    void markUnknown(Connection con, Request req, String detailJson, long fence) {
        execute(con, req, "SELECT idem_mark_unknown(?, ?::jsonb, scope => ?, fence => ?)",
                req.key, detailJson, req.scope, fence);
    }

    void checkpoint(Connection con, Request req, String recoveryPoint, long fence) {
        execute(con, req, "SELECT idem_checkpoint(?, ?, scope => ?, fence => ?)",
                req.key, recoveryPoint, req.scope, fence);
    }

    Instant extendLease(Connection con, Request req, Duration lease, long fence) {
        String sql = "SELECT idem_extend_lease(?, ? * interval '1 millisecond', scope => ?, fence => ?)";
        try (PreparedStatement ps = con.prepareStatement(sql)) {
            ps.setString(1, req.key);
            ps.setLong(2, lease.toMillis());
            ps.setString(3, req.scope);
            ps.setLong(4, fence);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                Timestamp end = rs.getTimestamp(1);
                return end.toInstant();
            }
        } catch (SQLException e) {
            throw translate(e, req, sql);
        }
    }

    private void execute(Connection con, Request req, String sql, Object... args) {
        try (PreparedStatement ps = con.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) {
                ps.setObject(i + 1, args[i]);
            }
            ps.executeQuery().close();
        } catch (SQLException e) {
            throw translate(e, req, sql);
        }
    }

    /**
     * The SQLSTATEs of the answer mapping the client packages share as this
     * library's exceptions; anything else as Spring's DataAccessException.
     */
    RuntimeException translate(SQLException e, Request req, String sql) {
        String state = e.getSQLState() == null ? "" : e.getSQLState();
        switch (state) {
            case "IK001":
                return new IdempotencyKeyReusedException(req.key, req.scope, e);
            case "IK002":
            case "IK003":
                return new IdempotencyLeaseLostException(req.key, req.scope, e);
            case "40001":
            case "40P01":
                return new IdempotencyRetryException(req.key, req.scope, e);
            case "25006":
                return new IdempotencyReadOnlyException(req.key, req.scope, e);
            case "22004":
            case "22023":
            case "22008":
                return new IdempotencyKeyInvalidException(req.key, req.scope, e);
            case "42501":
                return new IdempotencyScopeForbiddenException(req.key, req.scope, e);
            default:
                break;
        }
        if (isUnavailable(state, String.valueOf(e.getMessage()))) {
            return new IdempotencyUnavailableException(req.key, req.scope, e);
        }
        DataAccessException translated = TRANSLATOR.translate("idempotency", sql, e);
        return translated != null ? translated : new IllegalStateException(e);
    }

    /**
     * The database is unavailable or the session ended: connection errors,
     * shutdown, recovery, statement timeout or cancel, idle-in-transaction
     * timeout, too many connections, and Citus's errors right after a shard
     * move.
     */
    private static boolean isUnavailable(String state, String message) {
        switch (state) {
            case "57P01":
            case "57P02":
            case "57P03":
            case "57014":
            case "25P03":
            case "53300":
                return true;
            case "25001":
                return message.contains("cannot perform query on placements");
            case "XX000":
                return message.contains("cannot execute a distributed query from a query on a shard")
                        || message.contains("could not commit transaction");
            default:
                return state.startsWith("08");
        }
    }
}
