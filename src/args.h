/*
 * args.h
 *	  Argument checks shared by the SQL-callable functions (args.c): NULL
 *	  and length checks, key and scope, ttl and lease ends.
 */
#ifndef IDEMPOTENCY_ARGS_H
#define IDEMPOTENCY_ARGS_H

#include "fmgr.h"
#include "datatype/timestamp.h"
#include "idempotency.h"

extern void idem_require_arg(FunctionCallInfo fcinfo, int argno,
							 const char *argname, const char *fn);
extern IdemKey idem_get_key(FunctionCallInfo fcinfo, int key_arg,
							int scope_arg, const char *fn);
extern void idem_check_length(const char *value, bool is_scope);
extern void idem_require_read_write(const char *fn);
extern TimestampTz idem_interval_end(FunctionCallInfo fcinfo, int argno,
									 const char *argname, TimestampTz now);
extern TimestampTz idem_ttl_end(FunctionCallInfo fcinfo, int argno, TimestampTz now);

#endif							/* IDEMPOTENCY_ARGS_H */
