/*
 * outbox.h
 *	  The transactional outbox (outbox.c): what idem_purge needs of it.
 */
#ifndef IDEMPOTENCY_OUTBOX_H
#define IDEMPOTENCY_OUTBOX_H

#include "datatype/timestamp.h"

extern int64 idem_outbox_purge(Oid fn, TimestampTz now, int32 batch_size);

#endif							/* IDEMPOTENCY_OUTBOX_H */
