/*
 * delegation.h
 *	  Who a function's table work runs as (delegation.c): the caller
 *	  when it holds privileges on the table (invoker mode), else, after a
 *	  check of the scope grants, the table's owner (delegated mode).
 */
#ifndef IDEMPOTENCY_DELEGATION_H
#define IDEMPOTENCY_DELEGATION_H

typedef struct IdemActor
{
	Oid			caller;			/* the calling role */
	bool		delegated;		/* working as the table's owner */
	Oid			save_user;
	int			save_sec;
} IdemActor;

extern void idem_actor_begin(IdemActor *actor, Oid relid, Oid namespace,
							 const char *scope);
extern void idem_actor_end(IdemActor *actor);
extern void idem_become_table_owner(Oid relid, Oid *save_user, int *save_sec);
extern bool idem_scope_is_permitted(Oid role, Oid namespace, const char *scope);

#endif							/* IDEMPOTENCY_DELEGATION_H */
