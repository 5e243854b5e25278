/*
 * A PHP thread's life: the PHP context a thread gets when it starts (with the host's
 * signals blocked, its name, and the slot other threads reach its script through, interrupt.c)
 * and frees when it ends. C because the context is TSRM's and the slot points into
 * PHP's executor globals, which only PHP's macros reach. See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <php_main.h>
#include <ext/date/php_date.h>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "shim.h"

void pw_shim_thread_init(const char *name, pw_kill_slot *slot)
{
	pw_rs_block_host_signals(); /* the host's signals: src/host.rs says which */
	pw_spawn_thread_blocks_signals(); /* the programs it starts get none blocked */
	if (name) {
		pthread_setname_np(pthread_self(), name);
	}
	(void)ts_resource(0);
	pw_crash_trail_thread_begins();
	/* PHP 8.2's date extension sets last_errors only when a request starts; a thread's
	 * globals are not zeroed, so a first request that fails before that point (a form
	 * over memory_limit) would free a garbage pointer at request shutdown (found by
	 * scripts/asan.sh). */
	zend_module_entry *date = zend_hash_str_find_ptr(&module_registry, "date", sizeof("date") - 1);
	if (date && date->globals_id_ptr) { /* date's globals id is not exported: ask its module */
		TSRMG_BULK(*date->globals_id_ptr, zend_date_globals *)->last_errors = NULL;
	}
	slot->thread = pthread_self();
	slot->timer = &EG(max_execution_timer_timer);
	slot->tid = gettid();
	slot->timed_out = &EG(timed_out);
	slot->vm_interrupt = &EG(vm_interrupt);
}

void pw_shim_thread_shutdown(void)
{
	pw_crash_trail_thread_ends();
	ts_free_thread();
}
