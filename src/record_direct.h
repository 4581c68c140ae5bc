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
									   bytea *fingerprint, const IdemClaimSpec *t,
									   bool nowait, IdemRowAddress *row);

/* A fenced write after a claim, as record_store.c's planned UPDATE makes it */
typedef enum IdemChangeKind
{
	IDEM_CHANGE_OUTCOME,		/* PLAN_SET_OUTCOME: status, value as result */
	IDEM_CHANGE_RELEASE,		/* PLAN_RELEASE: value as the reason */
	IDEM_CHANGE_CHECKPOINT		/* PLAN_CHECKPOINT: recovery_point */
} IdemChangeKind;

typedef struct IdemFencedChange
{
	IdemChangeKind kind;
	IdemStatus	status;
	Jsonb	   *value;
	const char *recovery_point;
	TimestampTz now;
} IdemFencedChange;

extern DirectAnswer idem_direct_fenced_update(Oid relid, const IdemKey *id,
											  int64 fence,
											  const IdemFencedChange *change,
											  IdemRowAddress *row);

#endif							/* IDEMPOTENCY_RECORD_DIRECT_H */
