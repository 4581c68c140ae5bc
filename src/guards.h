/*
 * guards.h
 *	  The guard triggers: idem_transition_guard (transition_guard.c: a
 *	  status column moves only along listed transitions, IK005) and
 *	  idem_version_guard (version_guard.c: optimistic locking on a version
 *	  column, IK006), and the checks both make of their declaration and
 *	  arguments (guards.c).
 *
 * Both work on the rows the trigger manager hands them, so every path that
 * writes the table through the executor is guarded: multi-row UPDATE,
 * UPDATE through a view, COPY, MERGE, INSERT ... ON CONFLICT DO UPDATE,
 * rows moving between partitions.
 */
#ifndef IDEMPOTENCY_GUARDS_H
#define IDEMPOTENCY_GUARDS_H

#include "commands/trigger.h"
#include "fmgr.h"

/* How each guard is declared, for hints */
#define TRANSITION_USAGE "idem_transition_guard('column', 'from>to', ...) with '>to' for a state allowed on INSERT"
#define VERSION_USAGE "idem_version_guard('column') on a smallint, integer or bigint column, BEFORE UPDATE FOR EACH ROW"

extern TriggerData *idem_guard_trigger_data(FunctionCallInfo fcinfo,
											const char *fn);
extern void idem_guard_bad_argument(TriggerData *trigdata, const char *fn,
									const char *arg, const char *detail,
									const char *hint);
extern AttrNumber idem_guard_column(TriggerData *trigdata, const char *fn,
									const char *column, const char *usage);
extern void idem_guard_bad_argument_count(TriggerData *trigdata,
										  bool transition_guard);

#endif							/* IDEMPOTENCY_GUARDS_H */
