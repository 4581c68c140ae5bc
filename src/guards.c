/*
 * guards.c
 *	  Two row trigger functions that make a table defend itself:
 *	  idem_transition_guard (a status column moves only along listed edges,
 *	  IK005) and idem_version_guard (optimistic lock on a version column,
 *	  IK006).
 *
 * Both work on the final row the trigger manager hands them, so every path
 * that writes the table through the executor is guarded: multi-row UPDATE,
 * UPDATE through a view, COPY, INSERT ... ON CONFLICT DO UPDATE.
 */
#include "idempotency.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/int.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

/* The TriggerData of a call; 39P01 when not called as a row trigger */
static TriggerData *
row_trigger_data(FunctionCallInfo fcinfo, const char *fn)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				errmsg("%s() was not called by the trigger manager", fn),
				errhint("Use it in CREATE TRIGGER ... FOR EACH ROW EXECUTE FUNCTION %s(...).", fn));
	if (!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		ereport(ERROR,
				errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				errmsg("%s() must be fired FOR EACH ROW", fn),
				errdetail("Trigger \"%s\" on table \"%s\" is a statement trigger.",
						  trigdata->tg_trigger->tgname,
						  RelationGetRelationName(trigdata->tg_relation)));
	return trigdata;
}

/* Raise 22023 for a bad argument of the trigger */
static void
bad_trigger_argument(TriggerData *trigdata, const char *fn, const char *arg,
					 const char *detail, const char *hint)
{
	ereport(ERROR,
			errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			errmsg("invalid argument \"%s\" of trigger \"%s\" on table \"%s\"",
				   arg, trigdata->tg_trigger->tgname,
				   RelationGetRelationName(trigdata->tg_relation)),
			errdetail_internal("%s", detail),
			errhint("%s is used as %s.  Recreate the trigger with corrected arguments.",
					fn, hint));
}

/* Column number of the trigger argument naming a column; 22023 if none */
static AttrNumber
guarded_column(TriggerData *trigdata, const char *fn, const char *column,
			   const char *usage)
{
	int			attno = SPI_fnumber(RelationGetDescr(trigdata->tg_relation), column);

	if (attno <= 0)
		bad_trigger_argument(trigdata, fn, column,
							 psprintf("Table \"%s\" has no column \"%s\".",
									  RelationGetRelationName(trigdata->tg_relation),
									  column),
							 usage);
	return (AttrNumber) attno;
}

/* A state in double quotes for a message, or NULL */
static const char *
state_for_message(const char *state)
{
	return state == NULL ? "NULL" : psprintf("\"%s\"", state);
}

/*-------------------------------------------------------------------------
 * idem_transition_guard
 *-------------------------------------------------------------------------
 */

#define TRANSITION_USAGE "idem_transition_guard('column', 'from>to', ...) with '>to' for a state allowed on INSERT"

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
		bad_trigger_argument(trigdata, "idem_transition_guard", arg,
							 psprintf("\"%s\" is not a label of enum %s.",
									  state, format_type_be(enum_type)),
							 TRANSITION_USAGE);
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
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("trigger \"%s\" on table \"%s\" needs a column and at least one transition",
					   tg->tgname, RelationGetRelationName(trigdata->tg_relation)),
				errdetail_plural("It was created with %d argument.",
								 "It was created with %d arguments.",
								 tg->tgnargs, tg->tgnargs),
				errhint("Use %s.", TRANSITION_USAGE));

	old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
	spec = palloc0(sizeof(TransitionSpec));
	spec->column = pstrdup(tg->tgargs[0]);
	spec->attno = guarded_column(trigdata, "idem_transition_guard",
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
			bad_trigger_argument(trigdata, "idem_transition_guard", arg,
								 "A transition is written 'from>to' with exactly one '>'.",
								 TRANSITION_USAGE);
		*gt = '\0';
		from = trim_state(copy);
		to = trim_state(gt + 1);
		if (*to == '\0')
			bad_trigger_argument(trigdata, "idem_transition_guard", arg,
								 "The state after '>' is empty.",
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
	spec->tgoid = tg->tgoid;
	MemoryContextSwitchTo(old);
	fcinfo->flinfo->fn_extra = spec;
	return spec;
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

/*
 * idem_transition_guard() RETURNS trigger
 *	  Arguments: the status column, then one 'from>to' per allowed
 *	  transition; '>to' lists a state a row may be inserted with (when any
 *	  is given, INSERT is restricted to them).  As a row trigger on UPDATE
 *	  (and INSERT) it lets through updates that keep the column's value and
 *	  moves along a listed edge; any other change raises IK005.  States are
 *	  compared in their text form.  Errors: IK005 transition (or initial
 *	  state) not allowed, 22023 bad trigger argument, 39P01 not fired as a
 *	  row trigger on INSERT or UPDATE.
 */
PG_FUNCTION_INFO_V1(idem_transition_guard);
Datum
idem_transition_guard(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = row_trigger_data(fcinfo, "idem_transition_guard");
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);
	TransitionSpec *spec;
	HeapTuple	result;
	char	   *from = NULL;
	char	   *to;

	if (!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) &&
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				errmsg("idem_transition_guard() must be fired on INSERT or UPDATE"),
				errdetail("Trigger \"%s\" on table \"%s\" fired on DELETE.",
						  trigdata->tg_trigger->tgname,
						  RelationGetRelationName(trigdata->tg_relation)));

	spec = parse_transition_spec(fcinfo, trigdata);

	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		result = trigdata->tg_newtuple;
		from = SPI_getvalue(trigdata->tg_trigtuple, desc, spec->attno);
		to = SPI_getvalue(trigdata->tg_newtuple, desc, spec->attno);
		/* staying in the same state is always allowed */
		if (from == NULL ? to == NULL : to != NULL && strcmp(from, to) == 0)
			return PointerGetDatum(result);
		if (from != NULL && to != NULL && edge_allowed(spec, from, to))
			return PointerGetDatum(result);
		ereport(ERROR,
				errcode(ERRCODE_IDEM_TRANSITION_NOT_ALLOWED),
				errmsg("transition of column \"%s\" from %s to %s is not allowed",
					   spec->column, state_for_message(from), state_for_message(to)),
				errdetail("The row of table \"%s\" is in state %s and the update sets %s; trigger \"%s\" allows only: %s.",
						  RelationGetRelationName(trigdata->tg_relation),
						  state_for_message(from), state_for_message(to),
						  trigdata->tg_trigger->tgname, spec->edges),
				errhint("Move the row along an allowed transition (HTTP 409); an update that keeps the state is always allowed."));
	}

	/* INSERT: restricted only when the trigger lists initial states */
	result = trigdata->tg_trigtuple;
	if (!spec->restricts_insert)
		return PointerGetDatum(result);
	to = SPI_getvalue(trigdata->tg_trigtuple, desc, spec->attno);
	if (to != NULL && edge_allowed(spec, NULL, to))
		return PointerGetDatum(result);
	ereport(ERROR,
			errcode(ERRCODE_IDEM_TRANSITION_NOT_ALLOWED),
			errmsg("initial state %s of column \"%s\" is not allowed",
				   state_for_message(to), spec->column),
			errdetail("The new row of table \"%s\" has state %s; trigger \"%s\" allows only: %s.",
					  RelationGetRelationName(trigdata->tg_relation),
					  state_for_message(to), trigdata->tg_trigger->tgname,
					  spec->edges),
			errhint("Insert rows in one of the states listed as '>state'."));
	return (Datum) 0;			/* keep compiler quiet */
}

/*-------------------------------------------------------------------------
 * idem_version_guard
 *-------------------------------------------------------------------------
 */

#define VERSION_USAGE "idem_version_guard('column') on a smallint, integer or bigint column, BEFORE UPDATE FOR EACH ROW"

/* A version as int64; a NULL version counts as 0 */
static int64
version_value(HeapTuple tuple, TupleDesc desc, AttrNumber attno, Oid type,
			  bool *isnull)
{
	Datum		d = heap_getattr(tuple, attno, desc, isnull);

	if (*isnull)
		return 0;
	switch (type)
	{
		case INT2OID:
			return DatumGetInt16(d);
		case INT4OID:
			return DatumGetInt32(d);
		default:
			return DatumGetInt64(d);
	}
}

/*
 * idem_version_guard() RETURNS trigger
 *	  Argument: the version column (default "version"), of type smallint,
 *	  integer or bigint.  BEFORE UPDATE FOR EACH ROW: an update that gives
 *	  the stored version gets it incremented; one that gives the stored
 *	  version + 1 (as ORMs do: SET version = read + 1 WHERE version = read)
 *	  keeps it; any other version raises IK006 (a NULL version counts as 0).  Errors: IK006
 *	  stale version, 22003 version past the type's range, 22023 bad trigger
 *	  argument, 39P01 not fired BEFORE UPDATE FOR EACH ROW.
 */
PG_FUNCTION_INFO_V1(idem_version_guard);
Datum
idem_version_guard(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = row_trigger_data(fcinfo, "idem_version_guard");
	Trigger    *tg = trigdata->tg_trigger;
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);
	const char *column;
	AttrNumber	attno;
	Oid			type;
	int64		stored;
	int64		given;
	bool		stored_null;
	bool		given_null;
	int64		next;
	Datum		value;
	bool		value_null = false;

	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		ereport(ERROR,
				errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				errmsg("idem_version_guard() must be fired BEFORE UPDATE FOR EACH ROW"),
				errdetail("Trigger \"%s\" on table \"%s\" fired %s %s.",
						  tg->tgname, RelationGetRelationName(trigdata->tg_relation),
						  TRIGGER_FIRED_BEFORE(trigdata->tg_event) ? "BEFORE" : "AFTER",
						  TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) ? "INSERT" :
						  TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ? "UPDATE" : "DELETE"),
				errhint("Use %s.", VERSION_USAGE));
	if (tg->tgnargs > 1)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("trigger \"%s\" on table \"%s\" takes at most one argument",
					   tg->tgname, RelationGetRelationName(trigdata->tg_relation)),
				errdetail_plural("It was created with %d argument.",
								 "It was created with %d arguments.",
								 tg->tgnargs, tg->tgnargs),
				errhint("Use %s.", VERSION_USAGE));

	column = tg->tgnargs == 1 ? tg->tgargs[0] : "version";
	attno = guarded_column(trigdata, "idem_version_guard", column, VERSION_USAGE);
	type = getBaseType(TupleDescAttr(desc, attno - 1)->atttypid);
	if (type != INT2OID && type != INT4OID && type != INT8OID)
		bad_trigger_argument(trigdata, "idem_version_guard", column,
							 psprintf("Column \"%s\" is of type %s.", column,
									  format_type_be(TupleDescAttr(desc, attno - 1)->atttypid)),
							 VERSION_USAGE);

	stored = version_value(trigdata->tg_trigtuple, desc, attno, type, &stored_null);
	given = version_value(trigdata->tg_newtuple, desc, attno, type, &given_null);
	if (pg_add_s64_overflow(stored, 1, &next) ||
		(type == INT2OID && next > PG_INT16_MAX) ||
		(type == INT4OID && next > PG_INT32_MAX))
		ereport(ERROR,
				errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				errmsg("version of the row is at the maximum of its type"),
				errdetail("Column \"%s\" of table \"%s\" stores version " INT64_FORMAT ".",
						  column, RelationGetRelationName(trigdata->tg_relation), stored),
				errhint("Use a bigint version column."));

	/* the update already carries the next version, as ORMs send it */
	if (!given_null && given == next)
		return PointerGetDatum(trigdata->tg_newtuple);

	if (stored != given || stored_null != given_null)
		ereport(ERROR,
				errcode(ERRCODE_IDEM_STALE_VERSION),
				errmsg("stale version: the row was changed since it was read"),
				errdetail("Column \"%s\" of table \"%s\" stores version %s; the update gives version %s.",
						  column, RelationGetRelationName(trigdata->tg_relation),
						  stored_null ? "NULL" : psprintf(INT64_FORMAT, stored),
						  given_null ? "NULL" : psprintf(INT64_FORMAT, given)),
				errhint("Read the row again and retry with its current version (HTTP 409)."));

	value = type == INT2OID ? Int16GetDatum((int16) next) :
		type == INT4OID ? Int32GetDatum((int32) next) : Int64GetDatum(next);

	{
		int			col = attno;

		return PointerGetDatum(heap_modify_tuple_by_cols(trigdata->tg_newtuple,
														 desc, 1, &col,
														 &value, &value_null));
	}
}
