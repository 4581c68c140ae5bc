package io.idempotency.spring.example;

/** A payment request as a client sends it; requestId is its idempotency key. */
public class PaymentRequest {
    private String requestId;
    private String account;
    private int amount;

    public PaymentRequest() {
    }

    public PaymentRequest(String requestId, String account, int amount) {
        this.requestId = requestId;
        this.account = account;
        this.amount = amount;
    }

    public String getRequestId() {
        return requestId;
    }

    public String getAccount() {
        return account;
    }

    public int getAmount() {
        return amount;
    }
}
