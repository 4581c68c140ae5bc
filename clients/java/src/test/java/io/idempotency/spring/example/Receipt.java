package io.idempotency.spring.example;

import java.util.Objects;

/** A line of a payment's receipt: replayed as a List<Receipt>, not as maps. */
public class Receipt {
    private long paymentId;
    private String line;

    public Receipt() {
    }

    public Receipt(long paymentId, String line) {
        this.paymentId = paymentId;
        this.line = line;
    }

    public long getPaymentId() {
        return paymentId;
    }

    public String getLine() {
        return line;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Receipt && ((Receipt) o).paymentId == paymentId && Objects.equals(((Receipt) o).line, line);
    }

    @Override
    public int hashCode() {
        return Objects.hash(paymentId, line);
    }
}
