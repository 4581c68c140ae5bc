/*
 * xact_claims.h
 *	  The claims held by the current transaction (xact_claims.c), and the
 *	  commit guard that refuses to commit one without an outcome (IK004).
 */
#ifndef IDEMPOTENCY_XACT_CLAIMS_H
#define IDEMPOTENCY_XACT_CLAIMS_H

#include "idempotency.h"

typedef struct HeldClaim
{
	char	   *scope;
	char	   *key;
	int64		fence;
	SubTransactionId claimed_in;	/* subtransaction that made the claim */
	SubTransactionId finished_in;	/* ... that recorded the outcome, or
									 * InvalidSubTransactionId while open */
} HeldClaim;

extern void idem_claims_register_callbacks(void);
extern void idem_claims_add(const IdemKey *id, int64 fence);
extern HeldClaim *idem_claims_find(const IdemKey *id);
extern void idem_claims_mark_finished(HeldClaim *claim);

#endif							/* IDEMPOTENCY_XACT_CLAIMS_H */
