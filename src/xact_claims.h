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
	IdemRowAddress row;			/* where its row version was last written, if
								 * known: a hint (record_direct.c) */
	SubTransactionId row_written_in;	/* subtransaction that last wrote it */
} HeldClaim;

extern void idem_claims_register_callbacks(void);
extern void idem_claims_add(const IdemKey *id, int64 fence,
							const IdemRowAddress *row);
extern HeldClaim *idem_claims_find(const IdemKey *id);
extern void idem_claims_mark_finished(HeldClaim *claim);
extern IdemRowAddress *idem_claims_row(HeldClaim *claim);

#endif							/* IDEMPOTENCY_XACT_CLAIMS_H */
