/*
 * record_direct.c
 *	  The direct heap/index path of record_store.c: reads of
 *	  idempotent_record through its primary key index, the dirty-snapshot
 *	  probe of wait => false, a claim's insert (speculative insertion, as
 *	  INSERT ... ON CONFLICT DO NOTHING), the update that records an
 *	  outcome, and purge's deletes through the expires_at index, without
 *	  planning or executor start-up.
 *
 * It is taken only where it behaves exactly as the planned SQL it replaces,
 * decided per table and cached with the table's layout: a plain local heap
 * table (relkind r, heap access method, no inheritance children, not a
 * partition, not a Citus table) whose columns have the types the install
 * script gave them.  Per call: idempotency.direct_access is on, no executor
 * permission hook is loaded (pgaudit, sepgsql: they must see every
 * access), the caller has the table privileges and no row level security
 * applies, and a write has nothing more to do than the row change and its
 * constraints (see write_layout).  Otherwise the functions here answer
 * DIRECT_NOT_USED and record_store.c runs the SQL.  Visibility, predicate
 * locks (SERIALIZABLE), statistics and WAL come from the table and index
 * access methods, as they do under the executor, and an index scanned stays
 * locked to the end of the transaction, as the executor keeps it.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/nbtree.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_am_d.h"
#include "catalog/pg_class_d.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_enum.h"
#include "catalog/pg_namespace_d.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "citus.h"
#include "compat.h"
#include "idempotency.h"
#include "record_direct.h"
#include "record_store.h"

/* Attribute numbers of the columns the direct path reads */
typedef struct RecordColumns
{
	AttrNumber	scope;
	AttrNumber	key;
	AttrNumber	status;
	AttrNumber	fingerprint;
	AttrNumber	result;
	AttrNumber	recovery_point;
	AttrNumber	fence;
	AttrNumber	locked_until;
	AttrNumber	created_at;
	AttrNumber	updated_at;
	AttrNumber	expires_at;
} RecordColumns;

/*
 * The columns as the install script creates them: name and type
 * (InvalidOid: the extension's idem_status).  A table changed since (a
 * column added, a type, typmod, collation, default, identity or generated
 * expression changed) is written through the SQL, which applies them.
 */
static const struct
{
	const char *name;
	Oid			type;
	bool		nullable;		/* left NULL by a claim's insert */
}			install_columns[] = {
	{"scope", TEXTOID, false}, {"key", TEXTOID, false},
	{"status", InvalidOid, false}, {"fingerprint", BYTEAOID, true},
	{"result", JSONBOID, true}, {"recovery_point", TEXTOID, true},
	{"fence", INT8OID, false}, {"locked_until", TIMESTAMPTZOID, true},
	{"created_at", TIMESTAMPTZOID, false}, {"updated_at", TIMESTAMPTZOID, false},
	{"expires_at", TIMESTAMPTZOID, false}
};

/* attnum of a live column, or InvalidAttrNumber */
static AttrNumber
column_number(TupleDesc desc, const char *name)
{
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
			return att->attnum;
	}
	return InvalidAttrNumber;
}

/*
 * What the direct path needs to know of the table, computed once per table
 * and again after any change to it (a relcache invalidation: columns,
 * constraints, indexes, children, Citus distributing it).  A table that is
 * not a local heap table, or whose columns do not have the types the
 * install script gave them (a column dropped and added again with another
 * type), gets no direct path at all (pk_index invalid): the SQL then gives
 * its own answers and errors.  One with inheritance children, or that is a
 * partition, gets only the probe of wait => false (stand_in false).
 */
typedef struct RecordLayout
{
	Oid			relid;			/* InvalidOid until computed */
	RecordColumns col;
	Oid			status_value[IDEM_UNKNOWN + 1];
	Oid			pk_index;		/* B-tree primary key on (scope, key), or
								 * InvalidOid: no direct path at all */
	Oid			expires_at_index;	/* ascending B-tree on expires_at or on
									 * its bucket (expiry_bucketed), or
									 * InvalidOid */
	bool		expiry_bucketed;	/* expires_at_index has
									 * date_bin(expiry_stride, expires_at,
									 * expiry_origin) */
	Interval	expiry_stride;
	TimestampTz expiry_origin;
	bool		stand_in;		/* no inheritance children, not a partition:
								 * the direct path may stand in for the SQL */
	bool		install_shape;	/* columns and unique indexes as installed:
								 * direct writes may run */
	MemoryContext context;		/* holds checks */
	int			nchecks;
	Node	  **checks;			/* the CHECK constraints' expressions, in the
								 * relcache's order, deserialized once */
} RecordLayout;

static RecordLayout layout;
static uint64 layout_invalidations = 0;

static void
layout_invalidate(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == layout.relid)
		layout.relid = InvalidOid;
	layout_invalidations++;
}

/*
 * Is the table a local heap table, whose heap and primary key hold all its
 * rows?  Not so with another access method, or with Citus.
 */
static bool
local_heap_table(Relation heap)
{
	return heap->rd_rel->relkind == RELKIND_RELATION &&
		heap->rd_rel->relam == HEAP_TABLE_AM_OID &&
		!idem_citus_table(RelationGetRelid(heap));
}

/*
 * Do the columns have the types the install script gave them (type,
 * typmod, collation)?  The direct path reads them as such.
 */
static bool
columns_typed_as_installed(Relation heap)
{
	TupleDesc	desc = RelationGetDescr(heap);
	Oid			status_type = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid,
											  CStringGetDatum("idem_status"),
											  ObjectIdGetDatum(RelationGetNamespace(heap)));

	for (int i = 0; i < (int) lengthof(install_columns); i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, column_number(desc, install_columns[i].name) - 1);
		Oid			type = OidIsValid(install_columns[i].type) ?
			install_columns[i].type : status_type;

		if (att->atttypid != type || att->atttypmod != -1 ||
			att->attcollation != (type == TEXTOID ? DEFAULT_COLLATION_OID : InvalidOid))
			return false;
	}
	return true;
}

/*
 * ... and has nothing been added that an INSERT or UPDATE would apply:
 * another column, an identity, a generated expression, a default on a
 * column that a claim leaves NULL?
 */
static bool
columns_as_installed(Relation heap)
{
	TupleDesc	desc = RelationGetDescr(heap);
	int			columns = 0;

	for (int i = 0; i < desc->natts; i++)
		if (!TupleDescAttr(desc, i)->attisdropped)
			columns++;
	if (columns != (int) lengthof(install_columns))
		return false;
	for (int i = 0; i < (int) lengthof(install_columns); i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, column_number(desc, install_columns[i].name) - 1);

		if (att->attidentity != '\0' || att->attgenerated != '\0' ||
			(install_columns[i].nullable && att->atthasdef))
			return false;
	}
	return true;
}

/*
 * Is expr date_bin(a constant stride, expires_at, a constant origin) of
 * timestamptz, the expiry bucket that purge's index holds since 1.2?  Then
 * the stride and origin are copied into l.
 */
static bool
expiry_bucket_expression(Node *expr, RecordLayout *l)
{
	FuncExpr   *f = (FuncExpr *) expr;
	Const	   *stride;
	Var		   *column;
	Const	   *origin;

	if (!IsA(expr, FuncExpr) || f->funcid != F_DATE_BIN_INTERVAL_TIMESTAMPTZ_TIMESTAMPTZ ||
		list_length(f->args) != 3)
		return false;
	stride = linitial(f->args);
	column = lsecond(f->args);
	origin = lthird(f->args);
	if (!IsA(stride, Const) || stride->constisnull || !IsA(origin, Const) ||
		origin->constisnull || !IsA(column, Var) || column->varattno != l->col.expires_at)
		return false;
	l->expiry_stride = *DatumGetIntervalP(stride->constvalue);
	l->expiry_origin = DatumGetTimestampTz(origin->constvalue);
	return true;
}

/*
 * Find the primary key and purge's index on expires_at or its bucket;
 * false when there is another unique or exclusion index (INSERT ... ON
 * CONFLICT (scope, key) would take a unique index on the same columns as
 * an arbiter too).
 */
static bool
find_indexes(Relation heap, RecordLayout *l)
{
	List	   *indexes = RelationGetIndexList(heap);
	ListCell   *lc;
	bool		only_pk_unique = true;

	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index ind = index->rd_index;
		bool		btree = index->rd_rel->relam == BTREE_AM_OID &&
			ind->indisvalid && index->rd_indoption[0] == 0 &&
			heap_attisnull(index->rd_indextuple, Anum_pg_index_indpred, NULL);
		bool		plain_btree = btree &&
			heap_attisnull(index->rd_indextuple, Anum_pg_index_indexprs, NULL);

		if (ind->indisprimary && plain_btree && ind->indnkeyatts == 2 &&
			ind->indkey.values[0] == l->col.scope && ind->indkey.values[1] == l->col.key &&
			ind->indimmediate)
			l->pk_index = RelationGetRelid(index);
		else if (ind->indisunique || ind->indisexclusion)
			only_pk_unique = false;
		else if (plain_btree && ind->indnkeyatts == 1 &&
				 ind->indkey.values[0] == l->col.expires_at)
			l->expires_at_index = RelationGetRelid(index);
		else if (btree && ind->indnkeyatts == 1 && ind->indkey.values[0] == 0 &&
				 expiry_bucket_expression(linitial(RelationGetIndexExpressions(index)), l))
		{
			l->expires_at_index = RelationGetRelid(index);
			l->expiry_bucketed = true;
		}
		index_close(index, NoLock);
	}
	list_free(indexes);
	return only_pk_unique;
}

/* The columns and idem_status values; false if one is missing */
static bool
find_columns(Relation heap, RecordLayout *l)
{
	TupleDesc	desc = RelationGetDescr(heap);
	RecordColumns *c = &l->col;

	c->scope = column_number(desc, "scope");
	c->key = column_number(desc, "key");
	c->status = column_number(desc, "status");
	c->fingerprint = column_number(desc, "fingerprint");
	c->result = column_number(desc, "result");
	c->recovery_point = column_number(desc, "recovery_point");
	c->fence = column_number(desc, "fence");
	c->locked_until = column_number(desc, "locked_until");
	c->created_at = column_number(desc, "created_at");
	c->updated_at = column_number(desc, "updated_at");
	c->expires_at = column_number(desc, "expires_at");
	for (int i = 0; i < (int) (sizeof(RecordColumns) / sizeof(AttrNumber)); i++)
		if (((AttrNumber *) c)[i] == InvalidAttrNumber)
			return false;
	for (int i = 0; i <= (int) IDEM_UNKNOWN; i++)
	{
		l->status_value[i] =
			GetSysCacheOid2(ENUMTYPOIDNAME, Anum_pg_enum_oid,
							ObjectIdGetDatum(TupleDescAttr(desc, c->status - 1)->atttypid),
							CStringGetDatum(idem_status_names[i]));
		if (!OidIsValid(l->status_value[i]))
			return false;
	}
	return true;
}

/*
 * The CHECK constraints' expressions, deserialized once: ExecConstraints
 * would read them from their text at every call.
 */
static void
find_checks(Relation heap, RecordLayout *l)
{
	TupleConstr *constr = RelationGetDescr(heap)->constr;
	MemoryContext old;

	if (constr == NULL || constr->num_check == 0)
		return;
	old = MemoryContextSwitchTo(l->context);
	l->checks = palloc0(constr->num_check * sizeof(Node *));
	for (int i = 0; i < constr->num_check; i++)
		if (compat_check_enforced(&constr->check[i]))
			l->checks[i] = stringToNode(constr->check[i].ccbin);
	l->nchecks = constr->num_check;
	MemoryContextSwitchTo(old);
}

static const RecordLayout *
record_layout(Relation heap)
{
	static bool callback_registered = false;
	uint64		invalidations = layout_invalidations;

	if (layout.relid == RelationGetRelid(heap))
		return &layout;
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(layout_invalidate, (Datum) 0);
		callback_registered = true;
	}
	layout.relid = InvalidOid;
	layout.pk_index = InvalidOid;
	layout.expires_at_index = InvalidOid;
	layout.expiry_bucketed = false;
	layout.stand_in = false;
	layout.install_shape = false;
	if (layout.context == NULL)
		layout.context = AllocSetContextCreate(CacheMemoryContext, "idempotency record layout",
											   ALLOCSET_SMALL_SIZES);
	MemoryContextReset(layout.context);
	layout.nchecks = 0;
	layout.checks = NULL;
	if (local_heap_table(heap) && find_columns(heap, &layout) &&
		columns_typed_as_installed(heap))
	{
		/* the SQL reads the table ONLY, but is proven equal on plain ones */
		layout.stand_in = !heap->rd_rel->relhassubclass &&
			!heap->rd_rel->relispartition;
		layout.install_shape = find_indexes(heap, &layout) &&
			columns_as_installed(heap);
		if (layout.install_shape)
			find_checks(heap, &layout);
	}
	/* an invalidation met while computing (opening an index) may be ours */
	if (invalidations == layout_invalidations)
		layout.relid = RelationGetRelid(heap);
	return &layout;
}

/*
 * May the current user read (or write) the table directly with the given
 * privileges?  As for the SQL: USAGE on the schema and every one of the
 * privileges (pg_class_aclcheck would accept any one).  Row level security
 * that applies to the user (also with row_security = off, which makes the
 * SQL raise an error) leaves the work to the SQL, as does a table the
 * layout found no direct path for.
 */
static bool
caller_may(Relation heap, const RecordLayout *l, AclMode privileges)
{
	Oid			relid = RelationGetRelid(heap);

	return OidIsValid(l->pk_index) &&
		compat_namespace_aclcheck(RelationGetNamespace(heap), GetUserId(), ACL_USAGE) == ACLCHECK_OK &&
		(!heap->rd_rel->relrowsecurity ||
		 check_enable_rls(relid, InvalidOid, true) != RLS_ENABLED) &&
		pg_class_aclmask(relid, GetUserId(), privileges, ACLMASK_ALL) == privileges;
}

/*
 * The table's layout if the direct path may stand in for the SQL, or NULL:
 * not for a table with inheritance children or a partition, and not while
 * an executor permission hook is loaded (pgaudit's object audit log and
 * sepgsql's checks must see the access).
 */
static const RecordLayout *
direct_layout(Relation heap, AclMode privileges)
{
	const RecordLayout *l;

	if (!idem_direct_access || ExecutorCheckPerms_hook != NULL)
		return NULL;
	l = record_layout(heap);
	return l->stand_in && caller_may(heap, l, privileges) ? l : NULL;
}

/*
 * ... and for a write: not where the SQL would do more than the row change
 * and its constraints, which the direct write checks too: refuse it in a
 * read-only transaction (25006) or on a standby, fire triggers or rules,
 * or apply a default, a domain, a typmod, or a unique index added to the
 * table.
 */
static const RecordLayout *
write_layout(Relation heap, AclMode privileges)
{
	const RecordLayout *l = direct_layout(heap, privileges);

	if (l == NULL || !l->install_shape || XactReadOnly ||
		heap->trigdesc != NULL || heap->rd_rules != NULL)
		return NULL;
	return l;
}

/*
 * Open relid with lock and return its layout when the direct path may serve
 * this access (write_layout for a write, direct_layout for a read); NULL,
 * with the table closed again, when it may not.
 */
static const RecordLayout *
open_direct(Oid relid, LOCKMODE lock, AclMode privileges, bool write,
			Relation *heap)
{
	const RecordLayout *l;

	*heap = table_open(relid, lock);
	l = write ? write_layout(*heap, privileges) : direct_layout(*heap, privileges);
	if (l == NULL)
		table_close(*heap, NoLock);
	return l;
}

/* Scan keys for (scope, key) on the primary key index */
static void
pk_scan_keys(Relation index, const IdemKey *id, ScanKey skey)
{
	ScanKeyInit(&skey[0], 1, BTEqualStrategyNumber, F_TEXTEQ,
				CStringGetTextDatum(id->scope));
	skey[0].sk_collation = index->rd_indcollation[0];
	ScanKeyInit(&skey[1], 2, BTEqualStrategyNumber, F_TEXTEQ,
				CStringGetTextDatum(id->key));
	skey[1].sk_collation = index->rd_indcollation[1];
}

/*
 * The snapshot a statement run through SPI would get: our own earlier
 * writes made visible, then a new snapshot under READ COMMITTED (the
 * transaction's under REPEATABLE READ and SERIALIZABLE).
 */
static Snapshot
statement_snapshot(void)
{
	CommandCounterIncrement();
	return RegisterSnapshot(GetTransactionSnapshot());
}

/* The IdemStatus of an idem_status value read from the table */
static IdemStatus
status_of(const RecordLayout *l, Datum value)
{
	for (int i = 0; i <= (int) IDEM_UNKNOWN; i++)
		if (l->status_value[i] == DatumGetObjectId(value))
			return (IdemStatus) i;
	/* a label added to the enum: the SQL path's error */
	return idem_status_from_name(DatumGetCString(DirectFunctionCall1(enum_out, value)));
}

/* A varlena column copied (and detoasted) into context, or NULL */
static void *
varlena_copy(TupleTableSlot *slot, AttrNumber attno, MemoryContext context)
{
	bool		isnull;
	Datum		d = slot_getattr(slot, attno, &isnull);
	MemoryContext old;
	void	   *copy;

	if (isnull)
		return NULL;
	old = MemoryContextSwitchTo(context);
	copy = PG_DETOAST_DATUM_COPY(d);
	MemoryContextSwitchTo(old);
	return copy;
}

/*
 * idem_store_read's direct path: the record of id as a new statement's snapshot
 * sees it, copied into context.  Returns DIRECT_FOUND, DIRECT_NONE or
 * DIRECT_NOT_USED.
 */
DirectAnswer
idem_direct_read(Oid relid, const IdemKey *id, IdemRecord *rec, MemoryContext context)
{
	Relation	heap;
	Relation	index;
	const RecordLayout *l;
	RecordColumns col;
	ScanKeyData skey[2];
	Snapshot	snapshot;
	IndexScanDesc scan;
	DirectAnswer answer = DIRECT_NONE;
	TupleTableSlot *slot;

	l = open_direct(relid, AccessShareLock, ACL_SELECT, false, &heap);
	if (l == NULL)
		return DIRECT_NOT_USED;
	col = l->col;
	index = index_open(l->pk_index, AccessShareLock);
	pk_scan_keys(index, id, skey);
	snapshot = statement_snapshot();
	scan = compat_index_beginscan(heap, index, snapshot, 2);
	index_rescan(scan, skey, 2, NULL, 0);
	slot = table_slot_create(heap, NULL);

	if (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		d;
		MemoryContext old;

		answer = DIRECT_FOUND;
		rec->status = status_of(l, slot_getattr(slot, col.status, &isnull));
		rec->fingerprint = varlena_copy(slot, col.fingerprint, context);
		rec->result = varlena_copy(slot, col.result, context);
		d = slot_getattr(slot, col.recovery_point, &isnull);
		old = MemoryContextSwitchTo(context);
		rec->recovery_point = isnull ? NULL : TextDatumGetCString(d);
		MemoryContextSwitchTo(old);
		rec->fence = DatumGetInt64(slot_getattr(slot, col.fence, &isnull));
		rec->locked_until = DatumGetTimestampTz(slot_getattr(slot, col.locked_until, &isnull));
		rec->has_lease = !isnull;
		rec->expires_at = DatumGetTimestampTz(slot_getattr(slot, col.expires_at, &isnull));
		rec->created_at = DatumGetTimestampTz(slot_getattr(slot, col.created_at, &isnull));
		rec->updated_at = DatumGetTimestampTz(slot_getattr(slot, col.updated_at, &isnull));
	}

	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
	UnregisterSnapshot(snapshot);
	index_close(index, NoLock);
	table_close(heap, NoLock);
	return answer;
}

/*
 * Has an update or delete that did not abort replaced the version in slot
 * (a heap buffer slot)?  A lock is no update; an aborted subtransaction's
 * update left the version current.  The header is read under the buffer's
 * content lock, as heapam's visibility checks read it: other backends set
 * xmax and hint bits concurrently.
 */
static bool
version_replaced(TupleTableSlot *slot)
{
	Buffer		buffer = ((BufferHeapTupleTableSlot *) slot)->buffer;
	HeapTupleHeader tuple = ExecFetchSlotHeapTuple(slot, false, NULL)->t_data;
	bool		replaced = false;

	Assert(TTS_IS_BUFFERTUPLE(slot) && BufferIsValid(buffer));
	LockBuffer(buffer, BUFFER_LOCK_SHARE);
	if (!(tuple->t_infomask & HEAP_XMAX_INVALID) &&
		!HEAP_XMAX_IS_LOCKED_ONLY(tuple->t_infomask))
		replaced = !TransactionIdDidAbort(HeapTupleHeaderGetUpdateXid(tuple));
	LockBuffer(buffer, BUFFER_LOCK_UNLOCK);
	return replaced;
}

/*
 * Is another transaction, still in progress, inserting, updating or
 * deleting the record of id?  A plain snapshot cannot see that; the primary
 * key index read with a dirty snapshot can, the way nbtree's unique check
 * finds the transaction to wait for (_bt_check_unique), but without
 * waiting.  When one is found, *fingerprint (in context) is its
 * fingerprint.  Returns DIRECT_NOT_USED for callers that may not read the
 * table directly: they must not learn of rows they cannot read (see
 * idem_store_write_blocked_by_key), and for a table the layout cannot read (a
 * Citus table).  It is no stand-in for SQL, so an executor permission hook
 * and inheritance children (the SQL reads the table ONLY) do not matter.
 */
DirectAnswer
idem_direct_probe_uncommitted(Oid relid, const IdemKey *id, bytea **fingerprint,
							  MemoryContext context)
{
	/* the lock the write after the probe needs: it must not wait for it */
	Relation	heap = table_open(relid, RowExclusiveLock);
	Relation	index;
	SnapshotData dirty;
	ScanKeyData skey[2];
	IndexScanDesc scan;
	TupleTableSlot *slot;
	const RecordLayout *l = record_layout(heap);
	DirectAnswer answer = DIRECT_NONE;

	*fingerprint = NULL;
	/* not a stand-in for SQL (there is none): idem_direct_access aside */
	if (!caller_may(heap, l, ACL_SELECT))
	{
		table_close(heap, NoLock);
		return DIRECT_NOT_USED;
	}
	index = index_open(l->pk_index, AccessShareLock);
	pk_scan_keys(index, id, skey);
	InitDirtySnapshot(dirty);
	scan = compat_index_beginscan(heap, index, &dirty, 2);
	index_rescan(scan, skey, 2, NULL, 0);
	slot = table_slot_create(heap, NULL);

	/*
	 * A transaction writing the record shows several versions: the old one
	 * (its xmax running), and each version it wrote (its xmin running; the
	 * dirty snapshot does not look at their xmax).  The fingerprint that
	 * counts is that of the version no live update or delete has replaced;
	 * when that transaction deleted every version (or moved the record to
	 * another key), there is none: whether the key will be free depends on
	 * its commit, not on any fingerprint.
	 */
	while (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		if (!TransactionIdIsValid(dirty.xmin) && !TransactionIdIsValid(dirty.xmax))
			continue;			/* committed and untouched */
		answer = DIRECT_FOUND;
		if (!version_replaced(slot))
		{
			*fingerprint = varlena_copy(slot, l->col.fingerprint, context);
			break;
		}
	}

	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
	index_close(index, NoLock);
	table_close(heap, NoLock);
	return answer;
}

/*
 * The rest of EXPIRED() of record_store.c for a version past expires_at
 * (which the expires_at scan checks): not unknown, no live lease, and a
 * final outcome past its retention after it was recorded.
 */
static bool
purgeable(TupleTableSlot *slot, const RecordLayout *l, TimestampTz now)
{
	bool		isnull;
	TimestampTz locked_until;
	IdemStatus	status = status_of(l, slot_getattr(slot, l->col.status, &isnull));

	if (status == IDEM_UNKNOWN)
		return false;
	locked_until = DatumGetTimestampTz(slot_getattr(slot, l->col.locked_until, &isnull));
	if (!isnull && locked_until > now)
		return false;
	return record_kept_until(status,
							 DatumGetTimestampTz(slot_getattr(slot, l->col.expires_at, &isnull)),
							 DatumGetTimestampTz(slot_getattr(slot, l->col.created_at, &isnull)),
							 DatumGetTimestampTz(slot_getattr(slot, l->col.updated_at, &isnull))) <= now;
}

/* Do two versions of a record have the same scope and key? */
static bool
same_key(TupleTableSlot *a, TupleTableSlot *b, const RecordLayout *l)
{
	bool		isnull;

	return DatumGetBool(DirectFunctionCall2Coll(texteq, DEFAULT_COLLATION_OID,
												slot_getattr(a, l->col.scope, &isnull),
												slot_getattr(b, l->col.scope, &isnull))) &&
		DatumGetBool(DirectFunctionCall2Coll(texteq, DEFAULT_COLLATION_OID,
											 slot_getattr(a, l->col.key, &isnull),
											 slot_getattr(b, l->col.key, &isnull)));
}

/*
 * Delete the record version in slot as the SQL's FOR UPDATE SKIP LOCKED
 * and DELETE would.  First without waiting for anyone; a version that
 * someone holds is then locked as FOR UPDATE SKIP LOCKED locks it: taken
 * over when this transaction is its only holder, skipped when another
 * transaction holds it.  A version replaced since the snapshot raises
 * 40001 under REPEATABLE READ and SERIALIZABLE; under READ COMMITTED the
 * newest version of the row is locked (skipped if someone holds it) and
 * deleted if it is still expired and has the same key, as FOR UPDATE's
 * EvalPlanQual and then the DELETE's by primary key do.  Returns whether it
 * went.
 */
static bool
purge_one(Relation heap, const RecordLayout *l, TimestampTz now,
		  TupleTableSlot *slot, TupleTableSlot *scratch, Snapshot snapshot,
		  CommandId cid)
{
	TM_FailureData tmfd;
	bool		isnull;
	TM_Result	result = table_tuple_delete(heap, &slot->tts_tid, cid, snapshot,
											InvalidSnapshot, false, &tmfd, false);

	if (result == TM_Updated && !IsolationUsesXactSnapshot())
	{
		result = table_tuple_lock(heap, &slot->tts_tid, snapshot, scratch, cid,
								  LockTupleExclusive, LockWaitSkip,
								  TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
		if (result != TM_Ok)
			return false;
		if (DatumGetTimestampTz(slot_getattr(scratch, l->col.expires_at, &isnull)) > now ||
			!purgeable(scratch, l, now) || !same_key(slot, scratch, l))
			return false;
		result = table_tuple_delete(heap, &scratch->tts_tid, cid, snapshot,
									InvalidSnapshot, true, &tmfd, false);
	}

	if (result == TM_BeingModified)
	{
		result = table_tuple_lock(heap, &slot->tts_tid, snapshot, scratch, cid,
								  LockTupleExclusive, LockWaitSkip, 0, &tmfd);
		if (result == TM_Ok)
			result = table_tuple_delete(heap, &slot->tts_tid, cid, snapshot,
										InvalidSnapshot, true, &tmfd, false);
	}
	switch (result)
	{
		case TM_Ok:
			return true;
		case TM_Updated:
		case TM_Deleted:
			if (IsolationUsesXactSnapshot())
				ereport(ERROR,
						errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						errmsg("could not serialize access due to concurrent update"));
			return false;
		case TM_WouldBlock:
		case TM_SelfModified:
			return false;
		default:
			elog(ERROR, "attempted to delete invisible tuple");
	}
	return false;				/* keep compiler quiet */
}

/*
 * idem_store_purge's direct path: delete up to batch_size records expired at
 * now, oldest first, walking the index on expires_at (or its bucket: the
 * oldest bucket first), each as purge_one says
 * (without writing a row lock before each delete, as FOR UPDATE must,
 * unless someone else holds the row).
 * Returns how many went, or DIRECT_NOT_USED.
 */
int64
idem_direct_purge(Oid relid, TimestampTz now, int32 batch_size)
{
	Relation	heap = table_open(relid, RowExclusiveLock);
	Relation	index;
	const RecordLayout *l;
	ScanKeyData skey;
	Snapshot	snapshot;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	TupleTableSlot *scratch;
	CommandId	cid;
	int64		purged = 0;

	/*
	 * The SQL's SELECT ... FOR UPDATE needs UPDATE too; its DELETE fires
	 * triggers and rules, and is refused in a read-only transaction.
	 */
	l = direct_layout(heap, ACL_SELECT | ACL_UPDATE | ACL_DELETE);
	if (l == NULL || !OidIsValid(l->expires_at_index) ||
		XactReadOnly || heap->trigdesc != NULL || heap->rd_rules != NULL)
	{
		table_close(heap, NoLock);
		return DIRECT_NOT_USED;
	}
	/* a table published for deletes must say how to identify its rows */
	CheckCmdReplicaIdentity(heap, CMD_DELETE);
	index = index_open(l->expires_at_index, AccessShareLock);
	/* every record past expires_at is in now's bucket or an older one */
	ScanKeyInit(&skey, 1, BTLessEqualStrategyNumber, F_TIMESTAMPTZ_LE,
				l->expiry_bucketed ?
				DirectFunctionCall3(timestamptz_bin,
									IntervalPGetDatum(&l->expiry_stride),
									TimestampTzGetDatum(now),
									TimestampTzGetDatum(l->expiry_origin)) :
				TimestampTzGetDatum(now));
	snapshot = statement_snapshot();
	cid = GetCurrentCommandId(true);
	scan = compat_index_beginscan(heap, index, snapshot, 1);
	index_rescan(scan, &skey, 1, NULL, 0);
	slot = table_slot_create(heap, NULL);
	scratch = table_slot_create(heap, NULL);

	while (purged < batch_size &&
		   index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		CHECK_FOR_INTERRUPTS();
		if (purgeable(slot, l, now) &&
			purge_one(heap, l, now, slot, scratch, snapshot, cid))
			purged++;
	}

	ExecDropSingleTupleTableSlot(scratch);
	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
	UnregisterSnapshot(snapshot);
	index_close(index, NoLock);
	table_close(heap, NoLock);
	return purged;
}

/*
 * What the executor keeps for writing one table: the relation as result
 * relation, for an insert with its indexes open (with the unique-check
 * information of speculative insertion), and a snapshot as a statement of
 * its own would have.
 */
typedef struct DirectWrite
{
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *slot;		/* of the table's own slot type */
} DirectWrite;

static void
direct_write_begin(DirectWrite *w, Relation heap, const RecordLayout *l,
				   bool speculative, const AttrNumber *columns, int ncolumns)
{
	TupleConstr *constr = RelationGetDescr(heap)->constr;
	Bitmapset  *written = NULL;

	/*
	 * The range table says which columns the statement writes: an update's
	 * index hints and a constraint error's detail depend on it.
	 */
	for (int i = 0; i < ncolumns; i++)
		written = bms_add_member(written, columns[i] - FirstLowInvalidHeapAttributeNumber);
	w->estate = CreateExecutorState();
	compat_init_range_table(w->estate, heap, speculative, written);
	w->rri = makeNode(ResultRelInfo);
	InitResultRelInfo(w->rri, heap, 1, NULL, 0);
	/* what ExecConstraints would build from the constraints' text */
	if (constr != NULL && constr->num_check == l->nchecks && l->nchecks > 0)
	{
		MemoryContext old = MemoryContextSwitchTo(w->estate->es_query_cxt);

		ExprState **exprs = palloc0(l->nchecks * sizeof(ExprState *));

		/* a copy: the layout may be recomputed by a nested call meanwhile */
		for (int i = 0; i < l->nchecks; i++)
			if (l->checks[i] != NULL)
				exprs[i] = ExecPrepareExpr((Expr *) copyObject(l->checks[i]), w->estate);
		COMPAT_CHECK_EXPRS(w->rri) = exprs;
		MemoryContextSwitchTo(old);
	}
	/*
	 * An insert writes index entries; an update only when it is not HOT,
	 * which heapam decides from the relation's list of indexed columns, so
	 * idem_direct_fenced_update opens them then
	 */
	if (speculative)
		ExecOpenIndices(w->rri, true);
	/* the command id after statement_snapshot's increment, as SPI's */
	w->estate->es_snapshot = statement_snapshot();
	w->estate->es_output_cid = GetCurrentCommandId(true);
	w->slot = ExecInitExtraTupleSlot(w->estate, RelationGetDescr(heap),
									 table_slot_callbacks(heap));
}

static void
direct_write_end(DirectWrite *w)
{
	UnregisterSnapshot(w->estate->es_snapshot);
	ExecCloseIndices(w->rri);
	ExecResetTupleTable(w->estate->es_tupleTable, false);
	FreeExecutorState(w->estate);
}

/*
 * ON CONFLICT DO NOTHING met a committed record: under REPEATABLE READ and
 * SERIALIZABLE it must be visible to the snapshot, or the transaction
 * could act on a record it cannot see (40001, as nodeModifyTable.c's
 * ExecCheckTIDVisible raises; a record of our own transaction is fine).
 */
static void
check_conflict_visible(DirectWrite *w, ItemPointer tid)
{
	Relation	heap = w->rri->ri_RelationDesc;
	bool		isnull;
	TransactionId xmin;

	if (!IsolationUsesXactSnapshot())
		return;
	if (!table_tuple_fetch_row_version(heap, tid, SnapshotAny, w->slot))
		elog(ERROR, "failed to fetch conflicting idempotency record");
	xmin = DatumGetTransactionId(slot_getsysattr(w->slot, MinTransactionIdAttributeNumber,
												 &isnull));
	if (!table_tuple_satisfies_snapshot(heap, w->slot, w->estate->es_snapshot) &&
		!TransactionIdIsCurrentTransactionId(xmin))
		ereport(ERROR,
				errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				errmsg("could not serialize access due to concurrent update"));
	ExecClearTuple(w->slot);
}

/* Where slot's version of a record was written in heap (row may be NULL) */
static void
row_address_of(IdemRowAddress *row, Relation heap, TupleTableSlot *slot)
{
	if (row == NULL)
		return;
	row->relid = RelationGetRelid(heap);
	row->relfilenode = heap->rd_rel->relfilenode;
	row->tid = slot->tts_tid;
}

/*
 * idem_store_insert's direct path: INSERT ... ON CONFLICT (scope, key) DO
 * NOTHING of a new claim, by speculative insertion as the executor does it
 * (pre-check of the primary key, which waits for an uncommitted duplicate;
 * insert with a speculative token; index entries; confirm, or kill the
 * tuple and start over when a duplicate slipped in between).  Returns
 * DIRECT_FOUND when inserted, DIRECT_NONE when a committed record holds the
 * key, DIRECT_NOT_USED.
 *
 * The callers insert only after their read of the primary key found no
 * record, so the first attempt goes without the pre-check, which would
 * read the same index again: the insertion of the index entries finds a
 * duplicate that slipped in as it always must (its unique check), the
 * tuple is killed, and the next attempt pre-checks, waits and decides as
 * the executor's would.
 *
 * With nowait (a claim with wait => false) only that first attempt is
 * made: it waits for no other transaction (the unique check of a
 * speculative insertion only notes a possible duplicate, it never waits),
 * so a key nobody else writes is inserted here.  A duplicate that slipped
 * in is left to the planned SQL and its lock timeout, which tell a
 * duplicate still being written from a committed one (DIRECT_NOT_USED).
 */
DirectAnswer
idem_direct_insert(Oid relid, const IdemKey *id, bytea *fingerprint,
				   const IdemClaimSpec *t, bool nowait, IdemRowAddress *row)
{
	Relation	heap;
	const RecordLayout *l;
	RecordColumns col;
	AttrNumber	inserted[9];
	DirectWrite w;
	List	   *arbiter;
	TupleTableSlot *slot;
	DirectAnswer answer = DIRECT_FOUND;

	l = open_direct(relid, RowExclusiveLock, ACL_INSERT, true, &heap);
	if (l == NULL)
		return DIRECT_NOT_USED;
	col = l->col;
	/* the columns the SQL's INSERT names */
	inserted[0] = col.scope;
	inserted[1] = col.key;
	inserted[2] = col.status;
	inserted[3] = col.fingerprint;
	inserted[4] = col.fence;
	inserted[5] = col.locked_until;
	inserted[6] = col.created_at;
	inserted[7] = col.updated_at;
	inserted[8] = col.expires_at;
	direct_write_begin(&w, heap, l, true, inserted, lengthof(inserted));
	arbiter = list_make1_oid(l->pk_index);

	slot = ExecInitExtraTupleSlot(w.estate, RelationGetDescr(heap),
								  table_slot_callbacks(heap));
	ExecClearTuple(slot);
	memset(slot->tts_isnull, true, RelationGetDescr(heap)->natts * sizeof(bool));
#define SET(attno, value) \
	(slot->tts_values[(attno) - 1] = (value), slot->tts_isnull[(attno) - 1] = false)
	SET(col.scope, CStringGetTextDatum(id->scope));
	SET(col.key, CStringGetTextDatum(id->key));
	SET(col.status, ObjectIdGetDatum(l->status_value[t->status]));
	if (fingerprint != NULL)
		SET(col.fingerprint, PointerGetDatum(fingerprint));
	SET(col.fence, Int64GetDatum(1));
	if (t->leased)
		SET(col.locked_until, TimestampTzGetDatum(t->locked_until));
	SET(col.created_at, TimestampTzGetDatum(t->now));
	SET(col.updated_at, TimestampTzGetDatum(t->now));
	SET(col.expires_at, TimestampTzGetDatum(t->expires_at));
#undef SET
	ExecStoreVirtualTuple(slot);
	ExecConstraints(w.rri, slot, w.estate);

	for (bool precheck = false;; precheck = true)
	{
		ItemPointerData conflict;
		uint32		token;
		bool		lost_race = false;

		CHECK_FOR_INTERRUPTS();
		if (precheck &&
			!compat_check_index_constraints(w.rri, slot, w.estate, &conflict, arbiter))
		{
			check_conflict_visible(&w, &conflict);
			answer = DIRECT_NONE;
			break;
		}
		token = SpeculativeInsertionLockAcquire(GetCurrentTransactionId());
		table_tuple_insert_speculative(heap, slot, w.estate->es_output_cid, 0,
									   NULL, token);
		list_free(compat_insert_index_tuples(w.rri, slot, w.estate, false,
											 &lost_race, arbiter, false));
		table_tuple_complete_speculative(heap, slot, token, !lost_race);
		SpeculativeInsertionLockRelease(GetCurrentTransactionId());
		if (!lost_race)
		{
			row_address_of(row, heap, slot);
			break;
		}
		if (nowait)
		{
			answer = DIRECT_NOT_USED;
			break;
		}
	}

	direct_write_end(&w);
	table_close(heap, NoLock);
	return answer;
}

/*
 * Is the record version in slot that of id, with fence, and in a status the
 * change applies to?  (The WHERE clause of the planned UPDATE: a version
 * reached by following an update may belong to another key.)  An outcome
 * and a release need a claim without a final outcome (in_progress or
 * unknown), a checkpoint one in progress.
 */
static bool
open_with_fence(TupleTableSlot *slot, const RecordLayout *l, const IdemKey *id,
				int64 fence, IdemChangeKind kind)
{
	bool		isnull;
	Oid			status = DatumGetObjectId(slot_getattr(slot, l->col.status, &isnull));

	return DatumGetBool(DirectFunctionCall2Coll(texteq, DEFAULT_COLLATION_OID,
												slot_getattr(slot, l->col.scope, &isnull),
												CStringGetTextDatum(id->scope))) &&
		DatumGetBool(DirectFunctionCall2Coll(texteq, DEFAULT_COLLATION_OID,
											 slot_getattr(slot, l->col.key, &isnull),
											 CStringGetTextDatum(id->key))) &&
		DatumGetInt64(slot_getattr(slot, l->col.fence, &isnull)) == fence &&
		(status == l->status_value[IDEM_IN_PROGRESS] ||
		 (kind != IDEM_CHANGE_CHECKPOINT && status == l->status_value[IDEM_UNKNOWN]));
}

/*
 * The version the planned UPDATE of the change writes in place of old:
 *  - an outcome (PLAN_SET_OUTCOME): status, result, no lease and
 *    updated_at; expires_at, indexed, stays (a HOT update), but for an
 *    unknown outcome, which moves it to the end of its retention;
 *  - a release (PLAN_RELEASE): in progress, the reason in result, the
 *    lease ended now, updated_at;
 *  - a checkpoint (PLAN_CHECKPOINT): recovery_point and updated_at.
 */
static void
changed_version(TupleTableSlot *old, TupleTableSlot *new, const RecordLayout *l,
				const IdemFencedChange *change)
{
	int			natts = old->tts_tupleDescriptor->natts;
	const RecordColumns *col = &l->col;

	slot_getallattrs(old);
	ExecClearTuple(new);
	memcpy(new->tts_values, old->tts_values, natts * sizeof(Datum));
	memcpy(new->tts_isnull, old->tts_isnull, natts * sizeof(bool));
	new->tts_values[col->updated_at - 1] = TimestampTzGetDatum(change->now);
	switch (change->kind)
	{
		case IDEM_CHANGE_OUTCOME:
			new->tts_values[col->status - 1] = ObjectIdGetDatum(l->status_value[change->status]);
			new->tts_values[col->result - 1] = JsonbPGetDatum(change->value);
			new->tts_isnull[col->result - 1] = false;
			new->tts_isnull[col->locked_until - 1] = true;
			if (change->status == IDEM_UNKNOWN)
				new->tts_values[col->expires_at - 1] =
					TimestampTzGetDatum(record_kept_until(IDEM_SUCCEEDED,
														  DatumGetTimestampTz(old->tts_values[col->expires_at - 1]),
														  DatumGetTimestampTz(old->tts_values[col->created_at - 1]),
														  change->now));
			break;
		case IDEM_CHANGE_RELEASE:
			new->tts_values[col->status - 1] = ObjectIdGetDatum(l->status_value[IDEM_IN_PROGRESS]);
			new->tts_values[col->result - 1] = JsonbPGetDatum(change->value);
			new->tts_isnull[col->result - 1] = false;
			new->tts_values[col->locked_until - 1] = TimestampTzGetDatum(change->now);
			new->tts_isnull[col->locked_until - 1] = false;
			break;
		case IDEM_CHANGE_CHECKPOINT:
			new->tts_values[col->recovery_point - 1] = CStringGetTextDatum(change->recovery_point);
			new->tts_isnull[col->recovery_point - 1] = false;
			break;
	}
	ExecStoreVirtualTuple(new);
	ExecMaterializeSlot(new);
}

/* The columns the planned UPDATE of the change sets; returns how many */
static int
changed_columns(const RecordLayout *l, IdemChangeKind kind, AttrNumber *changed)
{
	int			n = 0;

	changed[n++] = l->col.updated_at;
	if (kind == IDEM_CHANGE_CHECKPOINT)
	{
		changed[n++] = l->col.recovery_point;
		return n;
	}
	changed[n++] = l->col.status;
	changed[n++] = l->col.result;
	changed[n++] = l->col.locked_until;
	if (kind == IDEM_CHANGE_OUTCOME)
		changed[n++] = l->col.expires_at;
	return n;
}

/*
 * 40001 under REPEATABLE READ or SERIALIZABLE when another transaction
 * deleted or updated the record since the snapshot, as nodeModifyTable.c
 * raises it
 */
static void
refuse_under_xact_snapshot(bool deleted)
{
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				deleted ?
				errmsg("could not serialize access due to concurrent delete") :
				errmsg("could not serialize access due to concurrent update"));
}

/*
 * Does row still hold the claim's row version, the one that the planned
 * UPDATE's primary key scan with snapshot would find?  Proven when the
 * version at row's TID, in the same table and storage (not truncated or
 * rewritten since), is visible to snapshot and was written by this
 * transaction, in a subtransaction still alive: no other transaction can
 * update, lock or delete a version it cannot see, so it is the newest
 * version of its row; and the primary key lets no other version of its
 * key be visible beside it (another transaction's would have been found by
 * the claim's read before its insert, under the same snapshot under
 * REPEATABLE READ; one of ours would have conflicted with it).  The caller
 * then checks key, fence and status as the UPDATE's WHERE clause does.
 * Not under SERIALIZABLE: the scan's predicate locks on the index would be
 * missing.  The TID's block still exists: the table has been locked since
 * the version was written (an address written in a subtransaction that
 * rolls back, releasing its locks, is forgotten), and no VACUUM truncates
 * a table locked so.  Fetched into slot when true.
 */
static bool
fetch_claim_row(Relation heap, const IdemRowAddress *row, Snapshot snapshot,
				TupleTableSlot *slot)
{
	bool		isnull;
	TransactionId xmin;
	ItemPointerData tid;
	Buffer		buffer;

	if (row == NULL || row->relid != RelationGetRelid(heap) ||
		row->relfilenode != heap->rd_rel->relfilenode ||
		!ItemPointerIsValid(&row->tid) || IsolationIsSerializable())
		return false;
	/*
	 * A TRUNCATE of storage this transaction made cuts the file and keeps
	 * the relfilenode: the block may be gone (checked only then, as it
	 * costs an lseek).
	 */
	if (compat_storage_new_in_xact(heap) &&
		ItemPointerGetBlockNumber(&row->tid) >= RelationGetNumberOfBlocks(heap))
		return false;
	/*
	 * What the primary key scan's heap fetch does first: prune the page if
	 * it is worth it, so that the outcome's HOT update finds room there
	 * (without it, dead versions stay until VACUUM and new records go to
	 * new pages: the table grows).
	 */
	buffer = ReadBuffer(heap, ItemPointerGetBlockNumber(&row->tid));
	heap_page_prune_opt(heap, buffer);
	ReleaseBuffer(buffer);
	tid = row->tid;
	if (!table_tuple_fetch_row_version(heap, &tid, snapshot, slot))
		return false;
	xmin = DatumGetTransactionId(slot_getsysattr(slot, MinTransactionIdAttributeNumber,
												 &isnull));
	if (TransactionIdIsCurrentTransactionId(xmin))
		return true;
	ExecClearTuple(slot);
	return false;
}

/*
 * idem_store_set_outcome's, idem_store_release's and idem_store_checkpoint's
 * direct path: the planned UPDATE of the change (PLAN_SET_OUTCOME,
 * PLAN_RELEASE, PLAN_CHECKPOINT in record_store.c), to the version of the
 * record a new statement snapshot sees, if it carries fence and is in a
 * status the change applies to.  That version is fetched by the claim's
 * row address (row, of a claim this transaction holds; NULL or relid
 * invalid if none) when fetch_claim_row proves it to be the one; otherwise
 * an outcome looks the key up in the primary key, and a release or a
 * checkpoint is left to the SQL (DIRECT_NOT_USED).  A version that a
 * concurrent transaction replaced is handled as UPDATE handles it: 40001
 * under REPEATABLE READ and SERIALIZABLE; otherwise the newest version of
 * the same row is locked and judged again (EvalPlanQual), and a deleted
 * row is not updated.  Returns DIRECT_FOUND when updated (*row is then the
 * new version's address), DIRECT_NONE when no such record,
 * DIRECT_NOT_USED.
 */
DirectAnswer
idem_direct_fenced_update(Oid relid, const IdemKey *id, int64 fence,
						  const IdemFencedChange *change, IdemRowAddress *row)
{
	Relation	heap;
	const RecordLayout *l;
	AttrNumber	changed[5];
	DirectWrite w;
	TupleTableSlot *old;
	TupleTableSlot *new;
	DirectAnswer answer = DIRECT_NONE;

	if (change->kind != IDEM_CHANGE_OUTCOME &&
		(row == NULL || !OidIsValid(row->relid) || !idem_direct_access))
		return DIRECT_NOT_USED;
	l = open_direct(relid, RowExclusiveLock, ACL_SELECT | ACL_UPDATE, true, &heap);
	if (l == NULL)
		return DIRECT_NOT_USED;
	/* a table published for updates must say how to identify its rows */
	CheckCmdReplicaIdentity(heap, CMD_UPDATE);
	direct_write_begin(&w, heap, l, false, changed,
					   changed_columns(l, change->kind, changed));
	old = w.slot;
	new = ExecInitExtraTupleSlot(w.estate, RelationGetDescr(heap),
								 table_slot_callbacks(heap));

	if (fetch_claim_row(heap, row, w.estate->es_snapshot, old))
		/* the lock the primary key scan would leave, to the end as ever */
		LockRelationOid(l->pk_index, AccessShareLock);
	else if (change->kind == IDEM_CHANGE_OUTCOME)
	{
		Relation	index = index_open(l->pk_index, AccessShareLock);
		ScanKeyData skey[2];
		IndexScanDesc scan;

		pk_scan_keys(index, id, skey);
		scan = compat_index_beginscan(heap, index, w.estate->es_snapshot, 2);
		index_rescan(scan, skey, 2, NULL, 0);
		if (!index_getnext_slot(scan, ForwardScanDirection, old))
			ExecClearTuple(old);
		index_endscan(scan);
		index_close(index, NoLock);
	}
	else
		answer = DIRECT_NOT_USED;

	while (!TupIsNull(old) && open_with_fence(old, l, id, fence, change->kind))
	{
		TM_FailureData tmfd;
		LockTupleMode lockmode;
		CompatIndexUpdate indexes;
		TM_Result	locked;

		CHECK_FOR_INTERRUPTS();
		changed_version(old, new, l, change);
		ExecConstraints(w.rri, new, w.estate);
		switch (compat_tuple_update(heap, &old->tts_tid, new,
									w.estate->es_output_cid,
									w.estate->es_snapshot, &tmfd, &lockmode,
									&indexes))
		{
			case TM_Ok:
				if (indexes != COMPAT_INDEX_NONE)
				{
					ExecOpenIndices(w.rri, false);
					list_free(compat_insert_index_tuples(w.rri, new, w.estate, true,
														 NULL, NIL,
														 indexes == COMPAT_INDEX_SUMMARIZING));
				}
				row_address_of(row, heap, new);
				answer = DIRECT_FOUND;
				break;
			case TM_Deleted:
				refuse_under_xact_snapshot(true);
				break;
			case TM_Updated:
				refuse_under_xact_snapshot(false);
				/* the newest version of this row, locked, judged again */
				locked = table_tuple_lock(heap, &old->tts_tid, w.estate->es_snapshot,
										  old, w.estate->es_output_cid, lockmode,
										  LockWaitBlock, TUPLE_LOCK_FLAG_FIND_LAST_VERSION,
										  &tmfd);
				if (locked == TM_Ok)
					continue;
				if (locked != TM_Deleted && locked != TM_SelfModified)
					elog(ERROR, "unexpected result locking an idempotency record");
				break;
			case TM_SelfModified:
				/* changed by a later command of ours: not this statement's */
				break;
			default:
				elog(ERROR, "unexpected result updating an idempotency record");
		}
		break;
	}

	direct_write_end(&w);
	table_close(heap, NoLock);
	return answer;
}
