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

#include "shim.h"

/* php://input's buffer (SG(request_info).request_body), which PHP frees only with the
 * request's whole resource list: a worker's would pile up. Freed at the request's end
 * unless something still holds it (the script exposed it, or keeps a php://input stream
 * open, whose reads go to it). Other temporary streams are the script's own, held by
 * its objects (an SplTempFileObject keeps its stream without a reference count), and
 * are never touched. */
static void pw_release_request_body(php_stream *body)
{
	if (!body || !body->res || body->__exposed || GC_REFCOUNT(body->res) != 1) {
		return;
	}
	zend_resource *res;
	ZEND_HASH_FOREACH_PTR(&EG(regular_list), res) {
		if (res->type == php_file_le_stream() && res->ptr && res->ptr != body &&
		    strcmp(((php_stream *)res->ptr)->ops->label, "Input") == 0) {
			return; /* a php://input stream: it reads the body through a plain pointer */
		}
	} ZEND_HASH_FOREACH_END();
	zend_list_delete(body->res);
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
		pw_worker_reset_modules_startup();
	} zend_catch {
		ok = false;
	} zend_end_try();
	SG(sapi_started) = 1;
	return ok && !EG(exception);
}

/* php_request_shutdown() for one request of a worker: flush and send the response, end
 * the session, free what the request owned (uploaded files, php://input), and put back
 * the engine's and the extensions' request state (worker_reset.c). Every step runs even
 * when one fails. False when one failed (see the top of this file). */
bool pw_worker_request_shutdown(void)
{
	volatile bool ok = true;
	zend_try {
		php_output_end_all();
	} zend_catch {
		ok = false;
	} zend_end_try();
	zend_try {
		pw_worker_reset_modules_shutdown();
	} zend_catch {
		ok = false;
	} zend_end_try();
	zend_try {
		php_output_deactivate();
	} zend_catch {
		ok = false;
	} zend_end_try();
	pw_skip_body_drain();
	php_stream *body = SG(request_info).request_body;
	zend_try {
		sapi_deactivate();
	} zend_catch {
		ok = false;
	} zend_end_try();
	zend_try {
		pw_release_request_body(body);
		pw_worker_reset_request_state();
	} zend_catch {
		ok = false;
	} zend_end_try();
	pw_clear_request_info();
	zend_set_memory_limit(PG(memory_limit));
	return ok && !EG(exception);
}
