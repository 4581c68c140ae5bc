/*
 * real_waits.so: preloaded into the server before Debian's libfaketime by
 * scripts/test_clock.sh (make test-clock).
 *
 * libfaketime wraps the calls that wait (epoll_wait, select, poll, the
 * sleeps) to scale their timeouts, and while the real call waits it gives
 * the real time to every clock read of that thread.  PostgreSQL reads the
 * clock in signal handlers that run during those waits: the timeout
 * handler (SIGALRM) would see the real time and fire statement_timeout at
 * the first deadlock_timeout, and the postmaster would start the
 * background processes it forks from a handler (autovacuum, the WAL
 * writer, parallel workers) on the real clock for good.  Here the waits go
 * straight to the C library, so every clock read of the server is faked.
 * The fake clock runs at the real rate, so the timeouts need no scaling.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

/* the C library's own function NAME, past libfaketime's wrapper */
static void *
libc_function(const char *name)
{
	static void *libc;

	if (libc == NULL)
		libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
	return dlsym(libc, name);
}

#define UNWRAPPED(type, name, params, args) \
	type name params \
	{ \
		static type (*real) params; \
		if (real == NULL) \
			real = (type (*) params) libc_function(#name); \
		return real args; \
	}

UNWRAPPED(int, epoll_wait, (int epfd, struct epoll_event *events, int maxevents, int timeout),
		  (epfd, events, maxevents, timeout))
UNWRAPPED(int, epoll_pwait, (int epfd, struct epoll_event *events, int maxevents, int timeout,
							 const sigset_t *sigmask),
		  (epfd, events, maxevents, timeout, sigmask))
UNWRAPPED(int, poll, (struct pollfd *fds, nfds_t nfds, int timeout), (fds, nfds, timeout))
UNWRAPPED(int, ppoll, (struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
					   const sigset_t *sigmask),
		  (fds, nfds, timeout, sigmask))
UNWRAPPED(int, select, (int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
						struct timeval *timeout),
		  (nfds, readfds, writefds, exceptfds, timeout))
UNWRAPPED(int, pselect, (int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
						 const struct timespec *timeout, const sigset_t *sigmask),
		  (nfds, readfds, writefds, exceptfds, timeout, sigmask))
UNWRAPPED(int, nanosleep, (const struct timespec *req, struct timespec *rem), (req, rem))
UNWRAPPED(int, clock_nanosleep, (clockid_t clockid, int flags, const struct timespec *req,
								 struct timespec *rem),
		  (clockid, flags, req, rem))
UNWRAPPED(int, usleep, (useconds_t usec), (usec))
UNWRAPPED(unsigned int, sleep, (unsigned int seconds), (seconds))
