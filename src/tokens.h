/*
 * tokens.h
 *	  Single-use tokens (tokens.c): what idem_purge needs of them.
 */
#ifndef IDEMPOTENCY_TOKENS_H
#define IDEMPOTENCY_TOKENS_H

#include "datatype/timestamp.h"

extern int64 idem_tokens_purge(Oid fn, TimestampTz now, int32 batch_size);

#endif							/* IDEMPOTENCY_TOKENS_H */
