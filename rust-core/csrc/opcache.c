/*
 * OPcache restarts under threads: points the hook that
 * scripts/php-patches/opcache-thread-hook.patch adds to OPcache at Rust's gate
 * (src/runtime/opcache.rs, which says why), on the main thread once the engine started;
 * and, on PHP threads, OPcache's revalidation for a worker's first boot (script.c) and
 * its samples between requests (script.c, worker.c). C because the hooks are OPcache's
 * symbols, and revalidation calls PHP functions, which can bail out. See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <php_ini.h>
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

/* zend_accel_usage(), which scripts/php-patches/<minor>/opcache-usage.patch adds: OPcache's
 * counters read without calling PHP, so a sample can neither allocate nor bail out. Looked
 * up once at startup; NULL with an unpatched OPcache, which then goes unreported. */
typedef bool (*pw_accel_usage_fn)(uint64_t out[6]);
static pw_accel_usage_fn pw_accel_usage;

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
	pw_accel_usage = (pw_accel_usage_fn)DL_FETCH_SYMBOL(RTLD_DEFAULT, "zend_accel_usage");
	return PW_OPCACHE_HOOK_ATTACHED;
}

/* Calls the PHP function `name`; false when it is not defined or failed. `ret` is set
 * only on success. */
static bool pw_call_php(const char *name, zval *ret, uint32_t argc, zval *argv)
{
	if (!zend_hash_str_exists(CG(function_table), name, strlen(name))) {
		return false;
	}
	zval fn;
	ZVAL_STRING(&fn, name);
	bool ok = call_user_function(CG(function_table), NULL, &fn, ret, argc, argv) == SUCCESS;
	zval_ptr_dtor(&fn);
	return ok;
}

void pw_opcache_revalidate(void)
{
	const char *restrict_api = INI_STR("opcache.restrict_api");
	if (restrict_api && *restrict_api) {
		return; /* the status and invalidate functions refuse scripts outside that path */
	}
	zval status, with_scripts;
	ZVAL_TRUE(&with_scripts);
	if (!pw_call_php("opcache_get_status", &status, 1, &with_scripts)) {
		return;
	}
	zval *scripts = Z_TYPE(status) == IS_ARRAY ? zend_hash_str_find(Z_ARRVAL(status), "scripts", sizeof("scripts") - 1) : NULL;
	if (scripts && Z_TYPE_P(scripts) == IS_ARRAY) {
		zval *info;
		ZEND_HASH_FOREACH_VAL(Z_ARRVAL_P(scripts), info) {
			zval *path = Z_TYPE_P(info) == IS_ARRAY ? zend_hash_str_find(Z_ARRVAL_P(info), "full_path", sizeof("full_path") - 1) : NULL;
			if (!path || Z_TYPE_P(path) != IS_STRING) {
				continue;
			}
			/* Without force: only a script whose file changed (any script, with
			 * validate_timestamps off, since OPcache cannot tell then). */
			zval args[2], done;
			ZVAL_COPY(&args[0], path);
			ZVAL_FALSE(&args[1]);
			if (pw_call_php("opcache_invalidate", &done, 2, args)) {
				zval_ptr_dtor(&done);
			}
			zval_ptr_dtor(&args[0]);
		} ZEND_HASH_FOREACH_END();
	}
	zval_ptr_dtor(&status);
}

void pw_opcache_sample(void)
{
	uint64_t usage[6];
	if (pw_accel_usage && pw_rs_opcache_sample_due() && pw_accel_usage(usage)) {
		pw_rs_opcache_usage(usage[0], usage[1], usage[2], usage[3], usage[4], usage[5]);
	}
}
