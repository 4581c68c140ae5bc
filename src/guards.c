/*
 * guards.c
 *	  What the two guard triggers (transition_guard.c, version_guard.c)
 *	  share: the checks of how a trigger was declared and of its arguments.
 */
#include "postgres.h"

#include "executor/spi.h"
#include "utils/rel.h"

#include "guards.h"

/* The TriggerData of a call; 39P01 when not called as a row trigger */
TriggerData *
idem_guard_trigger_data(FunctionCallInfo fcinfo, const char *fn)
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

/* Raise 22023 for a bad argument of the trigger; detail comes translated */
void
idem_guard_bad_argument(TriggerData *trigdata, const char *fn, const char *arg,
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
AttrNumber
idem_guard_column(TriggerData *trigdata, const char *fn, const char *column,
				  const char *usage)
{
	int			attno = SPI_fnumber(RelationGetDescr(trigdata->tg_relation), column);

	if (attno <= 0)
		idem_guard_bad_argument(trigdata, fn, column,
								psprintf(_("Table \"%s\" has no column \"%s\"."),
										 RelationGetRelationName(trigdata->tg_relation),
										 column),
								usage);
	return (AttrNumber) attno;
}

/*
 * Raise 22023 for a trigger created with too few arguments
 * (idem_transition_guard) or too many (idem_version_guard)
 */
void
idem_guard_bad_argument_count(TriggerData *trigdata, bool transition_guard)
{
	Trigger    *tg = trigdata->tg_trigger;

	ereport(ERROR,
			errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			transition_guard ?
			errmsg("trigger \"%s\" on table \"%s\" needs a column and at least one transition",
				   tg->tgname, RelationGetRelationName(trigdata->tg_relation)) :
			errmsg("trigger \"%s\" on table \"%s\" takes at most one argument",
				   tg->tgname, RelationGetRelationName(trigdata->tg_relation)),
			errdetail_plural("It was created with %d argument.",
							 "It was created with %d arguments.",
							 tg->tgnargs, tg->tgnargs),
			errhint("Use %s.", transition_guard ? TRANSITION_USAGE : VERSION_USAGE));
}
