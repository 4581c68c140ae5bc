/*
 * shmem_blocks.c
 *	  Shared memory blocks of the extension (the counters of stats.c, the
 *	  wakeups of outcome_wait.c), behind one pair of shmem hooks.  Without
 *	  shared_preload_libraries nothing is registered and every block
 *	  pointer stays NULL: its subsystem then reports 55000 or does nothing.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "shmem_blocks.h"

#define MAX_BLOCKS 4

typedef struct ShmemBlock
{
	const char *name;
	Size		size;
	IdemShmemInit init;
	void	  **block;
} ShmemBlock;

static ShmemBlock blocks[MAX_BLOCKS];
static int	nblocks = 0;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* shmem_request_hook: reserve every block, after earlier hooks */
static void
idem_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	for (int i = 0; i < nblocks; i++)
		RequestAddinShmemSpace(MAXALIGN(blocks[i].size));
}

/*
 * shmem_startup_hook: attach to every block, and set it up when this is the
 * first process to see it (the postmaster; after a crash restart, a new
 * block starts afresh).
 */
static void
idem_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	for (int i = 0; i < nblocks; i++)
	{
		bool		found;
		void	   *block = ShmemInitStruct(blocks[i].name, blocks[i].size, &found);

		if (!found)
			blocks[i].init(block);
		*blocks[i].block = block;
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Called from _PG_init: a block of size bytes named name, set up by init,
 * its address stored in *block in every process.  Does nothing unless the
 * library is being loaded through shared_preload_libraries.
 */
void
idem_shmem_register(const char *name, Size size, IdemShmemInit init,
					void **block)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	if (nblocks == MAX_BLOCKS)
		elog(ERROR, "too many idempotency shared memory blocks");
	if (nblocks == 0)
	{
		prev_shmem_request_hook = shmem_request_hook;
		shmem_request_hook = idem_shmem_request;
		prev_shmem_startup_hook = shmem_startup_hook;
		shmem_startup_hook = idem_shmem_startup;
	}
	blocks[nblocks].name = name;
	blocks[nblocks].size = size;
	blocks[nblocks].init = init;
	blocks[nblocks].block = block;
	nblocks++;
}
