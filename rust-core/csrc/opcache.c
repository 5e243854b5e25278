/*
 * OPcache restarts under threads: points the hook that
 * scripts/php-patches/opcache-thread-hook.patch adds to OPcache at Rust's gate
 * (src/runtime/opcache.rs, which says why). See shim.h.
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

/* A number of `array` at `key`, 0 when absent. */
static uint64_t pw_array_number(zval *array, const char *key)
{
	zval *v = array && Z_TYPE_P(array) == IS_ARRAY ? zend_hash_str_find(Z_ARRVAL_P(array), key, strlen(key)) : NULL;
	if (!v) {
		return 0;
	}
	if (Z_TYPE_P(v) == IS_LONG) {
		return Z_LVAL_P(v) < 0 ? 0 : (uint64_t)Z_LVAL_P(v);
	}
	if (Z_TYPE_P(v) == IS_DOUBLE) {
		return Z_DVAL_P(v) < 0 ? 0 : (uint64_t)Z_DVAL_P(v);
	}
	return 0;
}

void pw_opcache_sample(void)
{
	/* OPcache keeps its numbers in globals of its own that only its PHP functions read:
	 * one thread asks opcache_get_status(false) at most once a second, where PHP code
	 * may run (inside the OPcache gate, no script code of the request running). */
	if (!pw_rs_opcache_sample_due() || !zend_get_extension("Zend OPcache")) {
		return;
	}
	const char *restrict_api = INI_STR("opcache.restrict_api");
	if (restrict_api && *restrict_api) {
		return; /* it refuses scripts outside that path */
	}
	zend_try {
		zval status, without_scripts;
		ZVAL_FALSE(&without_scripts);
		if (pw_call_php("opcache_get_status", &status, 1, &without_scripts)) {
			if (Z_TYPE(status) == IS_ARRAY) {
				zval *memory = zend_hash_str_find(Z_ARRVAL(status), ZEND_STRL("memory_usage"));
				zval *stats = zend_hash_str_find(Z_ARRVAL(status), ZEND_STRL("opcache_statistics"));
				pw_rs_opcache_usage(pw_array_number(memory, "used_memory"), pw_array_number(memory, "free_memory"),
				                    pw_array_number(memory, "wasted_memory"), pw_array_number(stats, "hits"),
				                    pw_array_number(stats, "misses"), pw_array_number(stats, "num_cached_scripts"));
			}
			zval_ptr_dtor(&status);
		}
	} zend_end_try();
}
