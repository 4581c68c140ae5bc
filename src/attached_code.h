/*
 * attached_code.h
 *	  Refusals of code another role could have attached to the extension's
 *	  tables: triggers whose functions the table's owner did not write,
 *	  and foreign keys that reference the tables (attached_code.c).
 */
#ifndef IDEMPOTENCY_ATTACHED_CODE_H
#define IDEMPOTENCY_ATTACHED_CODE_H

extern void idem_refuse_attached_code(Oid relid);
extern void idem_refuse_referencing_keys(Oid relid);

#endif							/* IDEMPOTENCY_ATTACHED_CODE_H */
