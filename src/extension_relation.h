/*
 * extension_relation.h
 *	  The extension's tables and sequences, found by name in its schema
 *	  (extension_relation.c).
 */
#ifndef IDEMPOTENCY_EXTENSION_RELATION_H
#define IDEMPOTENCY_EXTENSION_RELATION_H

extern Oid	idem_extension_relation(const char *name, Oid namespace);

#endif							/* IDEMPOTENCY_EXTENSION_RELATION_H */
