/*
 * The start and end of each request a worker script serves; worker.c runs the loop
 * between them. See shim.h.
 *
 * Between requests PHP does not run its full request shutdown and startup (that would
 * free the script's objects); this trimmed cycle resets what must be fresh. Any bailout
 * caught in it, or an exception thrown by PHP code it ran (an output or session
 * handler, a __wakeup() during session start), leaves PHP unfit to go on with the
 * script: _zend_bailout marks an unclean shutdown, and a fatal error marks every object
 * destructed. Both steps then return false, and worker.c answers the request in flight
 * (a 500 unless its response left) and ends the script; the thread then starts it
 * again. C because every step can bail out, and resets PHP's globals through its macros.
 */
#include <php.h>
#include <SAPI.h>
#include <php_main.h>
#include <php_variables.h>
#include <php_output.h>
#include <ext/session/php_session.h>

#include "shim.h"

/* Modules whose per-request state lives past a worker request unless they run their
 * request shutdown and startup hooks around it. */
static const char *const pw_request_modules[] = {"filter", "session", NULL};

/* The user session save handler (session_set_save_handler()) outlives a worker's
 * request: the session's request shutdown frees it, as at the end of a php-fpm request,
 * but the worker code that set it (before the loop, or in an earlier request) does not
 * run again, and the next session_start() would fail ("Failed to initialize storage
 * module: user"). Its references are taken before and put back after; the request's
 * memory holds them either way, so a bailout in between loses nothing. */
typedef struct {
	__typeof__(PS(mod_user_names)) names; /* a struct of zvals on 8.4, an array before */
	zend_string *class_name;
} pw_session_handler;

static void pw_session_handler_keep(pw_session_handler *kept)
{
	memcpy(&kept->names, &PS(mod_user_names), sizeof(kept->names));
	zval *z = (zval *)&kept->names;
	for (size_t i = 0; i < sizeof(kept->names) / sizeof(zval); i++) {
		Z_TRY_ADDREF(z[i]);
	}
	kept->class_name = PS(mod_user_class_name) ? zend_string_copy(PS(mod_user_class_name)) : NULL;
}

static void pw_session_handler_restore(pw_session_handler *kept)
{
	zval *now = (zval *)&PS(mod_user_names);
	for (size_t i = 0; i < sizeof(kept->names) / sizeof(zval); i++) {
		zval_ptr_dtor(&now[i]); /* UNDEF after the shutdown, unless it set one anew */
	}
	memcpy(&PS(mod_user_names), &kept->names, sizeof(kept->names));
	if (PS(mod_user_class_name)) {
		zend_string_release(PS(mod_user_class_name));
	}
	PS(mod_user_class_name) = kept->class_name;
}

static void pw_modules_request_hook(bool startup)
{
	for (const char *const *name = pw_request_modules; *name; name++) {
		zend_module_entry *module = zend_hash_str_find_ptr(&module_registry, *name, strlen(*name));
		if (!module) {
			continue;
		}
		if (startup && module->request_startup_func) {
			module->request_startup_func(module->type, module->module_number);
		} else if (!startup && module->request_shutdown_func) {
			bool session = strcmp(*name, "session") == 0;
			pw_session_handler kept;
			if (session) {
				pw_session_handler_keep(&kept);
			}
			module->request_shutdown_func(module->type, module->module_number);
			if (session) {
				pw_session_release_leaked();
				pw_session_handler_restore(&kept);
			}
		}
	}
}

/* Frees temporary streams nobody holds (php://input's buffer, for one), which would
 * otherwise pile up in a worker's resource list. */
static void pw_release_temporary_streams(void)
{
	zend_resource *res;
	int stream_type = php_file_le_stream();
	ZEND_HASH_FOREACH_PTR(&EG(regular_list), res) {
		if (res->type == stream_type) {
			php_stream *stream = (php_stream *)res->ptr;
			if (stream && stream->ops == &php_stream_temp_ops && !stream->__exposed && GC_REFCOUNT(res) == 1) {
				zend_list_delete(res);
			}
		}
	} ZEND_HASH_FOREACH_END();
}

/* Gives the next request fresh superglobals; $_ENV keeps what the worker booted with. */
static void pw_reset_superglobals(void)
{
	/* $_ENV's slot is kept: php_hash_environment() empties every slot and fills only
	 * those it builds, and $_ENV, built just in time, would stay undefined. Extensions
	 * read the slots as arrays (Xdebug looks for its triggers there when the stack is
	 * empty again, in the shutdown functions after the worker's loop, and crashed). */
	zval env;
	ZVAL_COPY_VALUE(&env, &PG(http_globals)[TRACK_VARS_ENV]);
	ZVAL_UNDEF(&PG(http_globals)[TRACK_VARS_ENV]);
	for (int i = 0; i < NUM_TRACK_VARS; i++) {
		zval_ptr_dtor_nogc(&PG(http_globals)[i]);
	}
	/* $_SESSION belongs to the previous request's session. */
	zend_hash_str_del(&EG(symbol_table), ZEND_STRL("_SESSION"));
	php_hash_environment();
	if (Z_TYPE(env) == IS_ARRAY) {
		ZVAL_COPY_VALUE(&PG(http_globals)[TRACK_VARS_ENV], &env);
	} else {
		zval_ptr_dtor_nogc(&env);
		array_init(&PG(http_globals)[TRACK_VARS_ENV]);
	}
	/* The worker's code was compiled once, so just-in-time globals it uses are not
	 * re-created on their own: create them now. */
	zend_is_auto_global_str(ZEND_STRL("_SERVER"));
	if (zend_hash_str_exists(&EG(symbol_table), ZEND_STRL("_REQUEST"))) {
		zend_is_auto_global_str(ZEND_STRL("_REQUEST"));
	}
	if (zend_hash_str_exists(&EG(symbol_table), ZEND_STRL("_ENV"))) {
		zend_auto_global *env = zend_hash_str_find_ptr(CG(auto_globals), ZEND_STRL("_ENV"));
		if (env) {
			env->armed = 0;
		}
	}
}

/* php_request_startup() for one request of a worker: what must be fresh, without
 * tearing down the script's objects, statics and globals. False when it failed (see
 * the top of this file). */
bool pw_worker_request_startup(const pw_shim_request *req)
{
	volatile bool ok = true;
	zend_try {
		pw_fill_request_info(req);
		pw_release_temporary_streams();
		php_output_activate();
		PG(header_is_being_sent) = 0;
		PG(connection_status) = PHP_CONNECTION_NORMAL;
		sapi_activate();
		if (PG(expose_php)) {
			sapi_add_header(SAPI_PHP_VERSION_HEADER, sizeof(SAPI_PHP_VERSION_HEADER) - 1, 1);
		}
		if (PG(output_handler) && PG(output_handler)[0]) {
			zval handler;
			ZVAL_STRING(&handler, PG(output_handler));
			php_output_start_user(&handler, 0, PHP_OUTPUT_HANDLER_STDFLAGS);
			zval_ptr_dtor(&handler);
		} else if (PG(output_buffering)) {
			php_output_start_user(NULL, PG(output_buffering) > 1 ? PG(output_buffering) : 0,
			                      PHP_OUTPUT_HANDLER_STDFLAGS);
		} else if (PG(implicit_flush)) {
			php_output_set_implicit_flush(1);
		}
		pw_reset_superglobals();
		pw_modules_request_hook(true);
	} zend_catch {
		ok = false;
	} zend_end_try();
	SG(sapi_started) = 1;
	return ok && !EG(exception);
}

/* php_request_shutdown() for one request of a worker: flush and send the response, end
 * the session, free what the request owned (uploaded files, php://input). Every step
 * runs even when one fails. False when one failed (see the top of this file). */
bool pw_worker_request_shutdown(void)
{
	volatile bool ok = true;
	zend_try {
		php_output_end_all();
	} zend_catch {
		ok = false;
	} zend_end_try();
	zend_try {
		pw_modules_request_hook(false);
	} zend_catch {
		ok = false;
	} zend_end_try();
	zend_try {
		php_output_deactivate();
	} zend_catch {
		ok = false;
	} zend_end_try();
	pw_skip_body_drain();
	zend_try {
		sapi_deactivate();
	} zend_catch {
		ok = false;
	} zend_end_try();
	pw_clear_request_info();
	zend_set_memory_limit(PG(memory_limit));
	return ok && !EG(exception);
}
