/*
 * transition_guard.c
 *	  idem_transition_guard: a row trigger under which a status column
 *	  moves only along listed transitions (IK005), and the event trigger
 *	  function idem_guard_declarations, which refuses at CREATE TRIGGER a
 *	  declaration that would not see every write of its column.  The
 *	  trigger itself refuses such a declaration when it first fires.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/partition.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/event_trigger.h"
#include "executor/spi.h"
#include "parser/parse_func.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "guards.h"
#include "idempotency.h"
#include "message_text.h"

/* A state in double quotes for a message (shortened), or NULL */
static const char *
state_for_message(const char *state)
{
	return state == NULL ? "NULL" : psprintf("\"%s\"", idem_message_value(state));
}

/* The parsed arguments of one trigger, cached for a statement */
typedef struct TransitionSpec
{
	Oid			tgoid;
	AttrNumber	attno;
	const char *column;
	int			n_edges;
	char	  **from;			/* NULL: an initial state ('>to') */
	char	  **to;
	bool		restricts_insert;	/* some '>to' was given */
	char	   *edges;			/* "pending>paid, paid>shipped" for messages */
	Oid			root_tgoid;		/* the trigger as declared: on the
								 * partitioned table this one is cloned from,
								 * or this one */
	Oid			declared_on;	/* the table of root_tgoid, named in messages */
	bool		pairs_moves;	/* an AFTER trigger on a partition: a row
								 * moved to another partition comes as DELETE
								 * and INSERT */
} TransitionSpec;

static char *
trim_state(char *s)
{
	char	   *end;

	while (*s == ' ')
		s++;
	end = s + strlen(s);
	while (end > s && end[-1] == ' ')
		*--end = '\0';
	return s;
}

/* An enum column accepts only its labels */
static void
check_state(TriggerData *trigdata, Oid enum_type, const char *arg,
			const char *state)
{
	if (OidIsValid(enum_type) &&
		!SearchSysCacheExists2(ENUMTYPOIDNAME, ObjectIdGetDatum(enum_type),
							   CStringGetDatum(state)))
		idem_guard_bad_argument(trigdata, "idem_transition_guard", arg,
							 psprintf(_("\"%s\" is not a label of enum %s."),
									  state, format_type_be(enum_type)),
							 TRANSITION_USAGE);
}

/*
 * The trigger that trigger tgoid was cloned from on the table where it was
 * declared (following pg_trigger.tgparentid up a partition tree), and that
 * table in *relid.
 */
static Oid
declared_trigger(Oid tgoid, Oid *relid)
{
	Relation	pg_trigger = table_open(TriggerRelationId, AccessShareLock);

	for (;;)
	{
		ScanKeyData key;
		SysScanDesc scan;
		HeapTuple	tuple;
		Oid			parent;

		ScanKeyInit(&key, Anum_pg_trigger_oid, BTEqualStrategyNumber,
					F_OIDEQ, ObjectIdGetDatum(tgoid));
		scan = systable_beginscan(pg_trigger, TriggerOidIndexId, true, NULL, 1, &key);
		tuple = systable_getnext(scan);
		if (!HeapTupleIsValid(tuple))
			elog(ERROR, "could not find trigger %u", tgoid);
		parent = ((Form_pg_trigger) GETSTRUCT(tuple))->tgparentid;
		*relid = ((Form_pg_trigger) GETSTRUCT(tuple))->tgrelid;
		systable_endscan(scan);
		if (!OidIsValid(parent))
			break;
		tgoid = parent;
	}
	table_close(pg_trigger, AccessShareLock);
	return tgoid;
}

/*
 * Why two declarations cannot guard a partitioned table: refused both when
 * the trigger is created (idem_guard_declarations) and when it first fires
 * (a trigger cloned onto a table attached as a partition later).
 */
#define ON_PARTITION_DETAIL \
	_("It is declared on a partition, so it does not see the rows that an UPDATE moves into or out of that partition.")
#define AFTER_WITHOUT_MOVES_DETAIL \
	_("On a partitioned table, an UPDATE that moves a row to another partition fires the AFTER DELETE and AFTER INSERT triggers of the partitions, not AFTER UPDATE.")
#define AFTER_WITHOUT_MOVES_HINT \
	_("Declare it AFTER INSERT OR UPDATE OR DELETE FOR EACH ROW, or BEFORE UPDATE when it lists no initial states.")

/*
 * Raise 39P01: trigger tgname on relid, as declared, would not see every
 * write; detail and hint come translated
 */
static void
refuse_trigger(const char *tgname, Oid relid, const char *column,
			   const char *detail, const char *hint)
{
	ereport(ERROR,
			errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
			errmsg("trigger \"%s\" on table \"%s\" cannot guard the transitions of column \"%s\"",
				   tgname, get_rel_name(relid), column),
			errdetail_internal("%s", detail),
			errhint("%s", hint));
}

static void
refuse_declaration(TriggerData *trigdata, const TransitionSpec *spec,
				   const char *detail, const char *hint)
{
	refuse_trigger(trigdata->tg_trigger->tgname, spec->declared_on,
				   spec->column, detail, hint);
}

/*
 * Refuse a declaration under which some write of the column would escape
 * the guard, and note how moves between partitions reach it.  Edges are
 * checked on UPDATE; a BEFORE UPDATE row trigger sees a row that moves to
 * another partition as an update (it fires on the old partition before the
 * row is routed), an AFTER trigger sees the DELETE and the INSERT of the
 * move.  Initial states are checked on INSERT, by an AFTER trigger only:
 * for INSERT ... ON CONFLICT DO UPDATE a BEFORE INSERT trigger fires for
 * the proposed row before it is known whether the row is inserted or
 * updates the existing one, while AFTER INSERT fires for rows inserted.
 */
static void
check_declaration(TriggerData *trigdata, TransitionSpec *spec)
{
	Trigger    *tg = trigdata->tg_trigger;
	Relation	rel = trigdata->tg_relation;

	spec->root_tgoid = tg->tgoid;
	spec->declared_on = RelationGetRelid(rel);
	if (rel->rd_rel->relispartition)
	{
		spec->root_tgoid = declared_trigger(tg->tgoid, &spec->declared_on);
		if (get_rel_relispartition(spec->declared_on))
			refuse_declaration(trigdata, spec, ON_PARTITION_DETAIL,
							   psprintf(_("Create the trigger on the partitioned table \"%s\"."),
										get_rel_name(llast_oid(get_partition_ancestors(spec->declared_on)))));
	}
	if (TRIGGER_FOR_INSTEAD(tg->tgtype))
		refuse_declaration(trigdata, spec,
						   _("An INSTEAD OF trigger replaces the write it would have to check."),
						   _("Create it on the table behind the view, AFTER INSERT OR UPDATE FOR EACH ROW."));
	if (!TRIGGER_FOR_UPDATE(tg->tgtype))
		refuse_declaration(trigdata, spec,
						   _("It does not fire on UPDATE, so no transition would be checked."),
						   _("Declare it BEFORE UPDATE, or AFTER INSERT OR UPDATE when it lists initial states."));
	if (spec->restricts_insert && !TRIGGER_FOR_INSERT(tg->tgtype))
		refuse_declaration(trigdata, spec,
						   _("It lists initial states ('>state') but does not fire on INSERT, so they would not be checked."),
						   _("Declare it AFTER INSERT OR UPDATE FOR EACH ROW."));
	if (spec->restricts_insert && TRIGGER_FOR_BEFORE(tg->tgtype))
		refuse_declaration(trigdata, spec,
						   _("It lists initial states ('>state'), and a BEFORE INSERT trigger sees the row that INSERT ... ON CONFLICT DO UPDATE proposes before it is known whether that row is inserted or updates an existing row."),
						   _("Declare it AFTER INSERT OR UPDATE FOR EACH ROW: AFTER INSERT fires for the rows actually inserted."));
	spec->pairs_moves = rel->rd_rel->relispartition && TRIGGER_FOR_AFTER(tg->tgtype);
	if (spec->pairs_moves &&
		(!TRIGGER_FOR_INSERT(tg->tgtype) || !TRIGGER_FOR_DELETE(tg->tgtype)))
		refuse_declaration(trigdata, spec, AFTER_WITHOUT_MOVES_DETAIL,
						   AFTER_WITHOUT_MOVES_HINT);
	if (spec->pairs_moves && rel->rd_rel->relkind == RELKIND_FOREIGN_TABLE)
		refuse_declaration(trigdata, spec,
						   _("A row that an UPDATE moves into a foreign table partition is not a heap tuple, so an AFTER trigger cannot match it with the row it was."),
						   _("Declare it BEFORE UPDATE when it lists no initial states."));
}

static TransitionSpec *
parse_transition_spec(FunctionCallInfo fcinfo, TriggerData *trigdata)
{
	Trigger    *tg = trigdata->tg_trigger;
	TransitionSpec *spec = (TransitionSpec *) fcinfo->flinfo->fn_extra;
	MemoryContext old;
	StringInfoData edges;
	Oid			column_type;
	Oid			enum_type = InvalidOid;

	if (spec != NULL && spec->tgoid == tg->tgoid)
		return spec;

	if (tg->tgnargs < 2)
		idem_guard_bad_argument_count(trigdata, true);

	old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
	spec = palloc0(sizeof(TransitionSpec));
	spec->column = pstrdup(tg->tgargs[0]);
	spec->attno = idem_guard_column(trigdata, "idem_transition_guard",
								 spec->column, TRANSITION_USAGE);
	column_type = getBaseType(TupleDescAttr(RelationGetDescr(trigdata->tg_relation),
											spec->attno - 1)->atttypid);
	if (type_is_enum(column_type))
		enum_type = column_type;

	spec->n_edges = tg->tgnargs - 1;
	spec->from = palloc0(sizeof(char *) * spec->n_edges);
	spec->to = palloc0(sizeof(char *) * spec->n_edges);
	initStringInfo(&edges);
	for (int i = 0; i < spec->n_edges; i++)
	{
		const char *arg = tg->tgargs[i + 1];
		char	   *copy = pstrdup(arg);
		char	   *gt = strchr(copy, '>');
		char	   *from;
		char	   *to;

		if (gt == NULL || strchr(gt + 1, '>') != NULL)
			idem_guard_bad_argument(trigdata, "idem_transition_guard", arg,
								 _("A transition is written 'from>to' with exactly one '>'."),
								 TRANSITION_USAGE);
		*gt = '\0';
		from = trim_state(copy);
		to = trim_state(gt + 1);
		if (*to == '\0')
			idem_guard_bad_argument(trigdata, "idem_transition_guard", arg,
								 _("The state after '>' is empty."),
								 TRANSITION_USAGE);
		check_state(trigdata, enum_type, arg, to);
		if (*from == '\0')
		{
			spec->restricts_insert = true;
			from = NULL;
		}
		else
			check_state(trigdata, enum_type, arg, from);
		spec->from[i] = from;
		spec->to[i] = to;
		appendStringInfo(&edges, "%s%s>%s", i > 0 ? ", " : "",
						 from ? from : "", to);
	}
	spec->edges = edges.data;
	check_declaration(trigdata, spec);
	spec->tgoid = tg->tgoid;
	MemoryContextSwitchTo(old);
	fcinfo->flinfo->fn_extra = spec;
	return spec;
}

/*
 * An UPDATE that moves a row to another partition fires, for an AFTER
 * trigger, the DELETE of the old row and then the INSERT of the new one,
 * both with the command id of that UPDATE; what other statements write in
 * between carries other command ids.  The DELETE of a moved row (heapam
 * marks it) leaves its state here; the INSERT of the same command takes it
 * and checks the edge, instead of an initial state.
 */
static struct
{
	TransactionId xid;			/* top transaction; invalid: nothing pending */
	CommandId	cid;
	Oid			root_tgoid;
	char	   *from;			/* state of the old row, in TopMemoryContext;
								 * NULL for NULL */
}			pending_move;

/*
 * The command of this transaction that moved the trigger's old row out of
 * its partition (moved_out) or inserted its new row; false when there is
 * none.  The tuple header is read under the buffer's content lock.
 */
static bool
row_command(TriggerData *trigdata, bool moved_out, CommandId *cid)
{
	TupleTableSlot *slot = trigdata->tg_trigslot;
	HeapTupleHeader htup = trigdata->tg_trigtuple->t_data;
	Buffer		buffer;
	bool		found;

	if (slot == NULL || !TTS_IS_BUFFERTUPLE(slot))
		return false;
	buffer = ((BufferHeapTupleTableSlot *) slot)->buffer;
	if (BufferIsValid(buffer))
		LockBuffer(buffer, BUFFER_LOCK_SHARE);
	if (moved_out)
	{
		found = HeapTupleHeaderIndicatesMovedPartitions(htup) &&
			TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetUpdateXid(htup));
		if (found)
			*cid = HeapTupleHeaderGetCmax(htup);
	}
	else
	{
		found = TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetXmin(htup));
		if (found)
			*cid = HeapTupleHeaderGetCmin(htup);
	}
	if (BufferIsValid(buffer))
		LockBuffer(buffer, BUFFER_LOCK_UNLOCK);
	return found;
}

/* AFTER DELETE: if the row moved to another partition, note its state */
static void
note_move(TriggerData *trigdata, const TransitionSpec *spec, const char *from)
{
	CommandId	cid;

	if (!row_command(trigdata, true, &cid))
		return;
	if (pending_move.from != NULL)
		pfree(pending_move.from);
	pending_move.xid = GetTopTransactionId();
	pending_move.cid = cid;
	pending_move.root_tgoid = spec->root_tgoid;
	pending_move.from = from ? MemoryContextStrdup(TopMemoryContext, from) : NULL;
}

/*
 * AFTER INSERT: is the new row the other half of the move noted last?
 * Then *from is the state it moved from (NULL for NULL), valid until the
 * next move is noted.
 */
static bool
take_move(TriggerData *trigdata, const TransitionSpec *spec, char **from)
{
	CommandId	cid;

	if (!TransactionIdIsValid(pending_move.xid) ||
		pending_move.xid != GetTopTransactionIdIfAny() ||
		pending_move.root_tgoid != spec->root_tgoid ||
		!row_command(trigdata, false, &cid) || cid != pending_move.cid)
		return false;
	pending_move.xid = InvalidTransactionId;
	*from = pending_move.from;
	return true;
}

static bool
edge_allowed(const TransitionSpec *spec, const char *from, const char *to)
{
	for (int i = 0; i < spec->n_edges; i++)
	{
		if (strcmp(spec->to[i], to) != 0)
			continue;
		if (from == NULL ? spec->from[i] == NULL
			: spec->from[i] != NULL && strcmp(spec->from[i], from) == 0)
			return true;
	}
	return false;
}

/* A change of the column from one state to another: IK005 unless allowed */
static void
check_edge(TriggerData *trigdata, const TransitionSpec *spec,
		   const char *from, const char *to)
{
	/* staying in the same state is always allowed */
	if (from == NULL ? to == NULL : to != NULL && strcmp(from, to) == 0)
		return;
	if (from != NULL && to != NULL && edge_allowed(spec, from, to))
		return;
	ereport(ERROR,
			errcode(ERRCODE_IDEM_TRANSITION_NOT_ALLOWED),
			errmsg("transition of column \"%s\" from %s to %s is not allowed",
				   spec->column, state_for_message(from), state_for_message(to)),
			errdetail("The row of table \"%s\" is in state %s and the update sets %s; trigger \"%s\" allows only: %s.",
					  get_rel_name(spec->declared_on),
					  state_for_message(from), state_for_message(to),
					  trigdata->tg_trigger->tgname, spec->edges),
			errhint("Move the row along an allowed transition; an update that keeps the state is always allowed."));
}

/* A new row: IK005 unless its state is listed as initial */
static void
check_initial_state(TriggerData *trigdata, const TransitionSpec *spec,
					const char *to)
{
	if (to == NULL || !edge_allowed(spec, NULL, to))
		ereport(ERROR,
				errcode(ERRCODE_IDEM_TRANSITION_NOT_ALLOWED),
				errmsg("initial state %s of column \"%s\" is not allowed",
					   state_for_message(to), spec->column),
				errdetail("The new row of table \"%s\" has state %s; trigger \"%s\" allows only: %s.",
						  get_rel_name(spec->declared_on),
						  state_for_message(to), trigdata->tg_trigger->tgname,
						  spec->edges),
				errhint("Insert rows in one of the states listed as '>state'."));
}

/*
 * idem_transition_guard() RETURNS trigger
 *	  Arguments: the status column, then one 'from>to' per allowed
 *	  transition; '>to' lists a state a row may be inserted with (when any
 *	  is given, INSERT is restricted to them).  A row trigger declared
 *	  BEFORE UPDATE or BEFORE INSERT OR UPDATE without initial states, or
 *	  AFTER INSERT OR UPDATE (OR DELETE on a partitioned table, which is
 *	  where it must be declared): an update that keeps the column's value
 *	  or moves along a listed edge passes, any other change raises IK005,
 *	  also for a row moved to another partition and for the update of
 *	  INSERT ... ON CONFLICT DO UPDATE; a row inserted in a state not
 *	  listed as initial raises IK005.  States are compared in their text
 *	  form.  Errors: IK005 transition (or initial state) not allowed, 22023
 *	  bad trigger argument, 39P01 not fired as a row trigger, or declared
 *	  so that some write would escape it (reported when it first fires).
 */
PG_FUNCTION_INFO_V1(idem_transition_guard);
Datum
idem_transition_guard(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = idem_guard_trigger_data(fcinfo, "idem_transition_guard");
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);
	TransitionSpec *spec = parse_transition_spec(fcinfo, trigdata);
	HeapTuple	row = trigdata->tg_trigtuple;
	char	   *from;

	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		check_edge(trigdata, spec, SPI_getvalue(row, desc, spec->attno),
				   SPI_getvalue(trigdata->tg_newtuple, desc, spec->attno));
		return PointerGetDatum(trigdata->tg_newtuple);
	}
	if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
	{
		if (spec->pairs_moves)
			note_move(trigdata, spec, SPI_getvalue(row, desc, spec->attno));
		return PointerGetDatum(row);
	}
	/* INSERT: the new half of a row moved between partitions, or a new row */
	if (spec->pairs_moves && take_move(trigdata, spec, &from))
		check_edge(trigdata, spec, from, SPI_getvalue(row, desc, spec->attno));
	else if (spec->restricts_insert)
		check_initial_state(trigdata, spec, SPI_getvalue(row, desc, spec->attno));
	return PointerGetDatum(row);
}

/*
 * idem_guard_declarations() RETURNS event_trigger
 *	  At the end of CREATE TRIGGER: refuses (39P01) an idem_transition_guard
 *	  trigger that PostgreSQL would not fire at all for some write of its
 *	  column, so that refusing it when it first fires could come too late:
 *	  one declared on a partition (rows moved into the partition do not
 *	  fire it), or declared AFTER on a partitioned table without both
 *	  INSERT and DELETE (a row moved to another partition fires neither its
 *	  AFTER UPDATE nor anything else of it).  Run by the event trigger
 *	  idem_guard_declarations.
 */
PG_FUNCTION_INFO_V1(idem_guard_declarations);
Datum
idem_guard_declarations(PG_FUNCTION_ARGS)
{
	Oid			guard;
	Datum		arg;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				errmsg("idem_guard_declarations must be called as an event trigger"));
	guard = LookupFuncName(list_make2(makeString(get_namespace_name(get_func_namespace(fcinfo->flinfo->fn_oid))),
									  makeString("idem_transition_guard")),
						   0, NULL, false);
	arg = ObjectIdGetDatum(guard);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* the triggers created, not the clones PostgreSQL made on partitions */
	if (SPI_execute_with_args("SELECT t.tgname::pg_catalog.text, t.tgrelid, t.tgtype, c.relkind,"
							  " c.relispartition,"
							  " pg_catalog.split_part(pg_catalog.encode(t.tgargs, 'escape'), '\\000', 1)"
							  " FROM pg_catalog.pg_event_trigger_ddl_commands() AS d"
							  " JOIN pg_catalog.pg_trigger AS t ON t.oid OPERATOR(pg_catalog.=) d.objid"
							  " JOIN pg_catalog.pg_class AS c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid"
							  " WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_trigger'::pg_catalog.regclass"
							  " AND t.tgfoid OPERATOR(pg_catalog.=) $1"
							  " AND t.tgparentid OPERATOR(pg_catalog.=) 0",
							  1, (Oid[]) {OIDOID}, &arg, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the triggers created");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	row = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		char	   *tgname = SPI_getvalue(row, desc, 1);
		Oid			relid = DatumGetObjectId(SPI_getbinval(row, desc, 2, &isnull));
		int16		tgtype = DatumGetInt16(SPI_getbinval(row, desc, 3, &isnull));
		char		relkind = DatumGetChar(SPI_getbinval(row, desc, 4, &isnull));
		bool		partition = DatumGetBool(SPI_getbinval(row, desc, 5, &isnull));
		char	   *column = SPI_getvalue(row, desc, 6);

		if (partition)
			refuse_trigger(tgname, relid, column, ON_PARTITION_DETAIL,
						   psprintf(_("Create the trigger on the partitioned table \"%s\"."),
									get_rel_name(llast_oid(get_partition_ancestors(relid)))));
		if (relkind == RELKIND_PARTITIONED_TABLE && TRIGGER_FOR_ROW(tgtype) &&
			TRIGGER_FOR_AFTER(tgtype) &&
			(!TRIGGER_FOR_INSERT(tgtype) || !TRIGGER_FOR_DELETE(tgtype)))
			refuse_trigger(tgname, relid, column, AFTER_WITHOUT_MOVES_DETAIL,
						   AFTER_WITHOUT_MOVES_HINT);
	}
	SPI_finish();
	PG_RETURN_VOID();
}
