/*
 * message_text.c
 *	  Values a caller supplied (keys, scopes, states, versions) appear in
 *	  messages shortened to a fixed length, so that an error stays readable
 *	  and a server log bounded whatever the caller sent.
 */
#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/lsyscache.h"

#include "message_text.h"

/*
 * value itself when it has at most IDEM_MESSAGE_VALUE_CHARS characters,
 * else its first IDEM_MESSAGE_VALUE_CHARS characters and "..."
 */
const char *
idem_message_value(const char *value)
{
	int			len = strlen(value);
	int			cut = pg_mbcharcliplen(value, len, IDEM_MESSAGE_VALUE_CHARS);

	if (cut == len)
		return value;
	return psprintf("%.*s...", cut, value);
}

/* text with every occurrence of value replaced by its shortened form */
static char *
shorten_in(const char *text, const char *value)
{
	StringInfoData out;
	const char *short_value = idem_message_value(value);
	size_t		len = strlen(value);
	const char *at;

	if (text == NULL || short_value == value)
		return (char *) text;
	initStringInfo(&out);
	while ((at = strstr(text, value)) != NULL)
	{
		appendBinaryStringInfo(&out, text, at - text);
		appendStringInfoString(&out, short_value);
		text = at + len;
	}
	appendStringInfoString(&out, text);
	return out.data;
}

/*
 * The input function of type for value, whose error (an enum's 22P02
 * quotes the label) says value shortened as idem_message_value does
 */
Datum
idem_input_value(Oid type, int32 typmod, const char *value)
{
	Oid			typinput;
	Oid			typioparam;
	MemoryContext context = CurrentMemoryContext;
	Datum		result = (Datum) 0;

	getTypeInputInfo(type, &typinput, &typioparam);
	PG_TRY();
	{
		result = OidInputFunctionCall(typinput, (char *) value, typioparam, typmod);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/* rethrown at once: the abort that follows releases what it held */
		MemoryContextSwitchTo(context);
		edata = CopyErrorData();
		FlushErrorState();
		edata->message = shorten_in(edata->message, value);
		edata->detail = shorten_in(edata->detail, value);
		ReThrowError(edata);
	}
	PG_END_TRY();
	return result;
}
