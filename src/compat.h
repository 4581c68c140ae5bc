/*
 * compat.h
 *	  The differences between the PostgreSQL majors the extension builds
 *	  against (15 to 18), so that the rest of the tree calls one API.  Most
 *	  are the executor and access method calls of the direct path
 *	  (record_direct.c); pg_noreturn alone is in idempotency.h.
 */
#ifndef IDEMPOTENCY_COMPAT_H
#define IDEMPOTENCY_COMPAT_H

#include "access/genam.h"
#include "access/tableam.h"
#include "catalog/pg_namespace_d.h"
#include "common/base64.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
#include "nodes/parsenodes.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/relcache.h"

/* 16 folded the per-object ACL checks into object_aclcheck */
static inline AclResult
compat_namespace_aclcheck(Oid nspid, Oid roleid, AclMode mode)
{
#if PG_VERSION_NUM >= 160000
	return object_aclcheck(NamespaceRelationId, nspid, roleid, mode);
#else
	return pg_namespace_aclcheck(nspid, roleid, mode);
#endif
}

/*
 * May heap have been truncated in place (its file cut, the relfilenode
 * kept)?  Only where this transaction created the relation or its current
 * storage (16 renamed the field).
 */
static inline bool
compat_storage_new_in_xact(Relation heap)
{
#if PG_VERSION_NUM >= 160000
	SubTransactionId new_storage = heap->rd_newRelfilelocatorSubid;
#else
	SubTransactionId new_storage = heap->rd_newRelfilenodeSubid;
#endif

	return heap->rd_createSubid != InvalidSubTransactionId ||
		new_storage != InvalidSubTransactionId;
}

/* 18 added an instrumentation argument (EXPLAIN ANALYZE's; none here) */
static inline IndexScanDesc
compat_index_beginscan(Relation heap, Relation index, Snapshot snapshot,
					   int nkeys)
{
#if PG_VERSION_NUM >= 180000
	return index_beginscan(heap, index, snapshot, NULL, nkeys, 0);
#else
	return index_beginscan(heap, index, snapshot, nkeys, 0);
#endif
}

/*
 * A one-entry range table for writing heap, as the planner would make it
 * for an INSERT (insert) or UPDATE naming the columns in written (offset by
 * FirstLowInvalidHeapAttributeNumber).  16 moved the permission fields to
 * RTEPermissionInfo; 18 added the set of unpruned relations.
 */
static inline void
compat_init_range_table(EState *estate, Relation heap, bool insert,
						Bitmapset *written)
{
	RangeTblEntry *rte = makeNode(RangeTblEntry);

	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(heap);
	rte->relkind = heap->rd_rel->relkind;
	rte->rellockmode = RowExclusiveLock;
#if PG_VERSION_NUM >= 160000
	{
		RTEPermissionInfo *perm = makeNode(RTEPermissionInfo);

		perm->relid = rte->relid;
		perm->requiredPerms = insert ? ACL_INSERT : ACL_UPDATE;
		if (insert)
			perm->insertedCols = written;
		else
			perm->updatedCols = written;
		rte->perminfoindex = 1;
#if PG_VERSION_NUM >= 180000
		ExecInitRangeTable(estate, list_make1(rte), list_make1(perm),
						   bms_make_singleton(1));
#else
		ExecInitRangeTable(estate, list_make1(rte), list_make1(perm));
#endif
	}
#else
	rte->requiredPerms = insert ? ACL_INSERT : ACL_UPDATE;
	if (insert)
		rte->insertedCols = written;
	else
		rte->updatedCols = written;
	ExecInitRangeTable(estate, list_make1(rte));
#endif
}

/* 18 renamed the CHECK expressions of a result relation */
#if PG_VERSION_NUM >= 180000
#define COMPAT_CHECK_EXPRS(rri) ((rri)->ri_CheckConstraintExprs)
#else
#define COMPAT_CHECK_EXPRS(rri) ((rri)->ri_ConstraintExprs)
#endif

/* 18 has NOT ENFORCED CHECK constraints, which ExecConstraints skips */
static inline bool
compat_check_enforced(const ConstrCheck *check)
{
#if PG_VERSION_NUM >= 180000
	return check->ccenforced;
#else
	return true;
#endif
}

/* 18 added the tuple being updated (none for an insert) */
static inline bool
compat_check_index_constraints(ResultRelInfo *rri, TupleTableSlot *slot,
							   EState *estate, ItemPointer conflict,
							   List *arbiters)
{
#if PG_VERSION_NUM >= 180000
	return ExecCheckIndexConstraints(rri, slot, estate, conflict, NULL, arbiters);
#else
	return ExecCheckIndexConstraints(rri, slot, estate, conflict, arbiters);
#endif
}

/*
 * Which index entries an update needs.  From 16 on, an update that is HOT
 * for the other indexes still inserts into summarizing ones (BRIN).
 */
typedef enum CompatIndexUpdate
{
	COMPAT_INDEX_NONE,
	COMPAT_INDEX_ALL,
	COMPAT_INDEX_SUMMARIZING
} CompatIndexUpdate;

static inline TM_Result
compat_tuple_update(Relation rel, ItemPointer otid, TupleTableSlot *slot,
					CommandId cid, Snapshot snapshot, TM_FailureData *tmfd,
					LockTupleMode *lockmode, CompatIndexUpdate *indexes)
{
	TM_Result	result;
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes;

	result = table_tuple_update(rel, otid, slot, cid, snapshot, InvalidSnapshot,
								true, tmfd, lockmode, &update_indexes);
	*indexes = update_indexes == TU_All ? COMPAT_INDEX_ALL :
		update_indexes == TU_Summarizing ? COMPAT_INDEX_SUMMARIZING :
		COMPAT_INDEX_NONE;
#else
	bool		update_indexes;

	result = table_tuple_update(rel, otid, slot, cid, snapshot, InvalidSnapshot,
								true, tmfd, lockmode, &update_indexes);
	*indexes = update_indexes ? COMPAT_INDEX_ALL : COMPAT_INDEX_NONE;
#endif
	return result;
}

/* 16 added onlySummarizing */
static inline List *
compat_insert_index_tuples(ResultRelInfo *rri, TupleTableSlot *slot,
						   EState *estate, bool update, bool *spec_conflict,
						   List *arbiters, bool only_summarizing)
{
#if PG_VERSION_NUM >= 160000
	return ExecInsertIndexTuples(rri, slot, estate, update, spec_conflict != NULL,
								 spec_conflict, arbiters, only_summarizing);
#else
	Assert(!only_summarizing);
	return ExecInsertIndexTuples(rri, slot, estate, update, spec_conflict != NULL,
								 spec_conflict, arbiters);
#endif
}

/* 18 leaves out a deferrable primary key unless asked: earlier majors did not */
static inline Oid
compat_primary_key_index(Relation rel)
{
#if PG_VERSION_NUM >= 180000
	return RelationGetPrimaryKeyIndex(rel, true);
#else
	return RelationGetPrimaryKeyIndex(rel);
#endif
}

/* 18 takes the bytes to encode as uint8 */
static inline int
compat_b64_encode(const uint8 *src, int len, char *dst, int dstlen)
{
#if PG_VERSION_NUM >= 180000
	return pg_b64_encode(src, len, dst, dstlen);
#else
	return pg_b64_encode((const char *) src, len, dst, dstlen);
#endif
}

/* The setting called name (case-insensitive), or NULL: find_option from 16 */
static inline struct config_generic *
compat_find_guc(const char *name)
{
#if PG_VERSION_NUM >= 160000
	return find_option(name, false, true, ERROR);
#else
	struct config_generic **vars = get_guc_variables();
	int			n = GetNumConfigOptions();

	for (int i = 0; i < n; i++)
		if (pg_strcasecmp(vars[i]->name, name) == 0)
			return vars[i];
	return NULL;
#endif
}

#endif							/* IDEMPOTENCY_COMPAT_H */
