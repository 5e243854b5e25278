/*
 * Reaching a PHP thread's running script from another thread, and what the thread runs
 * when it is reached. The watchdog ends a stuck request with PHP's own timeout
 * (pw_shim_kill); a stop, or the profiler's sampler, sets the thread's EG(vm_interrupt)
 * (pw_shim_interrupt), and at its next instruction the thread runs
 * zend_interrupt_function here: the profiler's sample first (profile.c), then a
 * php_worker_on_stop() callback (stop.c). C because the timer, the flag and the hook
 * are PHP's executor globals and engine hook, which only PHP's macros reach. See shim.h.
 */
#include <php.h>
#include <SAPI.h>

#include <pthread.h>
#include <signal.h>

#include "shim.h"

bool pw_shim_kill(const pw_kill_slot *slot)
{
	/* PHP installs its SIGRTMIN handler when a thread first starts a request. Until then
	 * the signal would kill the whole process (its default action), and no script runs
	 * on any thread that could be stopped: an engine stopped right after it started. */
	struct sigaction current;
	if (sigaction(SIGRTMIN, NULL, &current) != 0 ||
	    (!(current.sa_flags & SA_SIGINFO) && (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN))) {
		return false;
	}
	/* PHP's timeout handler only acts on signals that carry this thread's timer. */
	union sigval value;
	value.sival_ptr = slot->timer;
	return pthread_sigqueue(slot->thread, SIGRTMIN, value) == 0;
}

bool pw_shim_timed_out(const pw_kill_slot *slot)
{
	return zend_atomic_bool_load((zend_atomic_bool *)slot->timed_out);
}

void pw_shim_interrupt(const pw_kill_slot *slot)
{
	/* The VM calls zend_interrupt_function (pw_interrupt, below) at its next
	 * instruction; the flag is atomic, as PHP's own timer handler needs. */
	zend_atomic_bool_store((zend_atomic_bool *)slot->vm_interrupt, true);
}

static void (*pw_previous_interrupt)(zend_execute_data *execute_data);

/* zend_interrupt_function: PHP calls it at the next instruction after EG(vm_interrupt)
 * was set, on the interrupted thread. Rust sets the flag when the thread is told to stop
 * and when the profiler wants a sample (pw_shim_interrupt). */
static void pw_interrupt(zend_execute_data *execute_data)
{
	/* First, while the stack is the one the weight was given for. */
	pw_profile_interrupt();
	if (pw_previous_interrupt) {
		pw_previous_interrupt(execute_data);
	}
	pw_stop_callback_run();
}

void pw_interrupt_startup(void)
{
	/* zend_startup() cleared it, so each engine start chains once. */
	if (zend_interrupt_function != pw_interrupt) {
		pw_previous_interrupt = zend_interrupt_function;
		zend_interrupt_function = pw_interrupt;
	}
}
