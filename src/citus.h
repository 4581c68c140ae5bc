/*
 * citus.h
 *	  Citus support (citus.c): which tables Citus distributes, the order
 *	  of the two libraries in shared_preload_libraries, and purge per
 *	  scope, so that every statement is routed to one shard.
 */
#ifndef IDEMPOTENCY_CITUS_H
#define IDEMPOTENCY_CITUS_H

#include "datatype/timestamp.h"
#include "saved_plans.h"

extern bool idem_citus_table(Oid relid);
extern void idem_check_preload_order(void);
extern void idem_citus_commit_init(void);
extern int64 idem_purge_by_scope(SavedPlans *set, int scopes_plan,
								 int scope_plan, Oid namespace,
								 TimestampTz now, int32 batch_size);

#endif							/* IDEMPOTENCY_CITUS_H */
