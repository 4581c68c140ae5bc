/*
 * shmem_blocks.h
 *	  The extension's shared memory (shmem_blocks.c): each subsystem that
 *	  needs a block registers it from _PG_init; the block exists only when
 *	  the library is in shared_preload_libraries.
 */
#ifndef IDEMPOTENCY_SHMEM_BLOCKS_H
#define IDEMPOTENCY_SHMEM_BLOCKS_H

/* Sets up a block the first time any process attaches to it */
typedef void (*IdemShmemInit) (void *block);

extern void idem_shmem_register(const char *name, Size size,
								IdemShmemInit init, void **block);

#endif							/* IDEMPOTENCY_SHMEM_BLOCKS_H */
