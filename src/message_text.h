/*
 * message_text.h
 *	  How messages show values that a caller supplied (message_text.c).
 */
#ifndef IDEMPOTENCY_MESSAGE_TEXT_H
#define IDEMPOTENCY_MESSAGE_TEXT_H

/* at most this many characters of a value, then an ellipsis */
#define IDEM_MESSAGE_VALUE_CHARS 100

extern const char *idem_message_value(const char *value);

#endif							/* IDEMPOTENCY_MESSAGE_TEXT_H */
