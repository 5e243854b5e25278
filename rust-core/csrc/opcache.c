/*
 * OPcache restarts under threads: points the hook that
 * scripts/php-patches/opcache-thread-hook.patch adds to OPcache at Rust's gate
 * (src/runtime/opcache.rs, which says why). See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <zend_extensions.h>

#include <dlfcn.h>

#include "shim.h"

/* OPcache's hook takes zend_accel_thread_event and zend_accel_restart_reason, two enums of
 * its own header (not installed); they travel as ints, with the values the patch gives. */
typedef bool (*pw_accel_thread_hook)(int event, int reason);

static bool pw_opcache_event(int event, int reason)
{
	return pw_rs_opcache_event(event, reason);
}

pw_opcache_hook pw_shim_opcache_attach(void)
{
	if (!zend_get_extension("Zend OPcache")) {
		return PW_OPCACHE_HOOK_ABSENT;
	}
	/* OPcache clears its extension handle to stay loaded for the life of the process, and
	 * PHP loads zend_extensions with RTLD_GLOBAL: look the hook up globally. */
	pw_accel_thread_hook *hook = (pw_accel_thread_hook *)DL_FETCH_SYMBOL(RTLD_DEFAULT, "zend_accel_thread_hook");
	if (!hook) {
		return PW_OPCACHE_HOOK_UNPATCHED;
	}
	*hook = pw_opcache_event;
	return PW_OPCACHE_HOOK_ATTACHED;
}
