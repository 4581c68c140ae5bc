package io.idempotency.spring.example;

/** A checked exception: @Transactional commits the transaction it passes through. */
public class ProviderUnavailableException extends Exception {
    private static final long serialVersionUID = 1L;

    public ProviderUnavailableException(String message) {
        super(message);
    }
}
