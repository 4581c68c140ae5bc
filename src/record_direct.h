/*
 * record_direct.h
 *	  The direct heap/index path behind the record store
 *	  (record_direct.c), used where it answers as the planned SQL does;
 *	  DIRECT_NOT_USED otherwise.
 */
#ifndef IDEMPOTENCY_RECORD_DIRECT_H
#define IDEMPOTENCY_RECORD_DIRECT_H

#include "idempotency.h"

typedef enum DirectAnswer
{
	DIRECT_NOT_USED = -1,
	DIRECT_NONE = 0,
	DIRECT_FOUND = 1
} DirectAnswer;

extern DirectAnswer idem_direct_read(Oid relid, const IdemKey *id, IdemRecord *rec,
									 MemoryContext context);
extern DirectAnswer idem_direct_probe_uncommitted(Oid relid, const IdemKey *id,
												  bytea **fingerprint,
												  MemoryContext context);
extern int64 idem_direct_purge(Oid relid, TimestampTz now, int32 batch_size);
extern DirectAnswer idem_direct_insert(Oid relid, const IdemKey *id,
									   bytea *fingerprint, const IdemClaimSpec *t);
extern DirectAnswer idem_direct_set_outcome(Oid relid, const IdemKey *id,
											int64 fence, IdemStatus status,
											Jsonb *result, TimestampTz now);

#endif							/* IDEMPOTENCY_RECORD_DIRECT_H */
