/*
 * record_store.h
 *	  The record store (record_store.c): every read and write of
 *	  idempotent_record goes through these calls, so that planned SQL
 *	  (which a distributed table can route) and the direct heap/index path
 *	  (record_direct.c) can both serve them.  Calls between
 *	  idem_store_begin and idem_store_end run as the caller, or as the
 *	  table's owner in delegated mode (delegation.h); SPI is connected when
 *	  a statement needs it; copied-out values live in the caller's context.
 */
#ifndef IDEMPOTENCY_RECORD_STORE_H
#define IDEMPOTENCY_RECORD_STORE_H

#include "access/htup.h"
#include "utils/resowner.h"
#include "utils/tuplestore.h"

#include "idempotency.h"

extern void idem_store_begin(Oid extension_function, bool nowait,
							 const char *scope);
extern void idem_store_end(void);
extern void idem_store_register_callbacks(void);
extern bool idem_store_read(const IdemKey *id, IdemRecord *rec);
extern bool idem_store_insert(const IdemKey *id, bytea *fingerprint,
							  const IdemClaimSpec *t, IdemRowAddress *row);
extern bool idem_store_reclaim_expired(const IdemKey *id, int64 seen_fence,
									   bytea *fingerprint, const IdemClaimSpec *t,
									   int64 *new_fence);
extern bool idem_store_take_over(const IdemKey *id, int64 seen_fence,
								 bytea *fingerprint, const IdemClaimSpec *t,
								 int64 *new_fence);
extern bool idem_store_set_outcome(const IdemKey *id, int64 fence,
								   IdemStatus status, Jsonb *result,
								   TimestampTz now, IdemRowAddress *row);
extern bool idem_store_release(const IdemKey *id, int64 fence, Jsonb *reason,
							   TimestampTz now, IdemRowAddress *row);
extern bool idem_store_checkpoint(const IdemKey *id, int64 fence,
								  const char *recovery_point, TimestampTz now,
								  IdemRowAddress *row);
extern bool idem_store_extend_lease(const IdemKey *id, int64 fence,
									TimestampTz locked_until, TimestampTz now);
extern int64 idem_store_purge(TimestampTz now, int32 batch_size);

extern bool idem_store_write_would_wait(void);
extern ErrorData *idem_store_subxact_error(MemoryContext context,
										   ResourceOwner owner);
extern IdemStatus idem_status_from_name(const char *name);
extern bool idem_store_write_blocked_by_key(const IdemKey *id, bytea **fingerprint);
extern bool idem_store_probe_uncommitted(const IdemKey *id, bytea **fingerprint);
extern HeapTuple idem_store_lookup(const IdemKey *id, TimestampTz now);
extern void idem_store_pending(TimestampTz at, Tuplestorestate *rows);

/* an insert met a record that row level security hides */
pg_noreturn extern void idem_store_hidden_record_error(const IdemKey *id);

#endif							/* IDEMPOTENCY_RECORD_STORE_H */
