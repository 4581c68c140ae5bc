/*
 * message_text.c
 *	  Values a caller supplied (keys, scopes, states, versions) appear in
 *	  messages shortened to a fixed length, so that an error stays readable
 *	  and a server log bounded whatever the caller sent.
 */
#include "postgres.h"

#include "mb/pg_wchar.h"

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
