/*
 * outcome_wait.h
 *	  A claim of a key held by a lease may wait for its outcome
 *	  (idem_claim's wait_for_outcome, outcome_wait.c); outcome writers
 *	  wake it at commit.
 */
#ifndef IDEMPOTENCY_OUTCOME_WAIT_H
#define IDEMPOTENCY_OUTCOME_WAIT_H

#include "datatype/timestamp.h"
#include "idempotency.h"

extern void idem_outcome_wait_init(void);
extern void idem_outcome_wait_require(void);
extern void idem_outcome_wait_wake_at_commit(const IdemKey *id);
extern uint64 idem_outcome_wait_generation(const IdemKey *id);
extern void idem_outcome_wait_sleep(const IdemKey *id, uint64 generation,
									TimestampTz until);

#endif							/* IDEMPOTENCY_OUTCOME_WAIT_H */
