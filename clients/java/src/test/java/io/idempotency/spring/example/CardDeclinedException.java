package io.idempotency.spring.example;

/** A final business answer: stored, and replayed to duplicates as the same exception. */
public class CardDeclinedException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public CardDeclinedException(String message) {
        super(message);
    }
}
