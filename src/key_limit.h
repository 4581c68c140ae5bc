/*
 * key_limit.h
 *	  The most idempotency.max_key_length may allow, in bytes: an entry of
 *	  the primary key's B-tree holds a scope and a key, and must fit in
 *	  2704 bytes on 8 kB pages (nbtree's BTMaxItemSize, reproduced from
 *	  BLCKSZ because its form differs between majors).  A value that does
 *	  not compress is stored as it is: the entry is an 8-byte header, then
 *	  each value with a 4-byte length word, aligned at 4 bytes (up to 3
 *	  bytes of padding between them): 8 + 4 + scope + 3 + 4 + key <= 2704,
 *	  so scope + key <= 2685 and each at most 1342.  idempotency_token's
 *	  (scope, 22-byte token) is shorter.
 */
#ifndef IDEMPOTENCY_KEY_LIMIT_H
#define IDEMPOTENCY_KEY_LIMIT_H

#include "access/itup.h"
#include "access/nbtree.h"
#include "storage/bufpage.h"

#define IDEM_BTREE_MAX_ITEM_SIZE \
	MAXALIGN_DOWN((BLCKSZ - MAXALIGN(SizeOfPageHeaderData + 3 * sizeof(ItemIdData) + \
									 3 * sizeof(ItemPointerData)) - \
				   MAXALIGN(sizeof(BTPageOpaqueData))) / 3)
#define IDEM_MAX_KEY_BYTES \
	((int) ((IDEM_BTREE_MAX_ITEM_SIZE - sizeof(IndexTupleData) - 2 * VARHDRSZ - 3) / 2))

#endif							/* IDEMPOTENCY_KEY_LIMIT_H */
