/*
 * The worker loop: frankenphp_handle_request() and php_worker_handle_task(), which a
 * worker script calls in its loop. Each call ends the script's boot request (the first
 * time), waits for the next request or task, starts it, runs the handler and ends it,
 * in the trimmed cycle of worker_request.c; when that cycle fails, the script is ended
 * from here (see the top of worker_request.c). And a worker script run as one request
 * of its own (a one-shot run). C because the handler is PHP code, and every step can
 * bail out. See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <php_main.h>
#include <ext/spl/spl_exceptions.h>
#include <Zend/zend_exceptions.h>

#include "shim.h"

/* True while the boot pseudo-request of a worker script is active: the first call to
 * frankenphp_handle_request() ends it. */
static __thread bool pw_in_boot_request;

void pw_worker_script_begins(void)
{
	pw_in_boot_request = true;
	/* A client that goes away must not end the worker script (a new boot per cancelled
	 * request); the script can still turn this off. */
	zend_string *name = zend_string_init("ignore_user_abort", sizeof("ignore_user_abort") - 1, 0);
	zend_alter_ini_entry_chars(name, "1", 1, PHP_INI_USER, PHP_INI_STAGE_RUNTIME);
	zend_string_release(name);
}

void pw_worker_script_ended(void)
{
	pw_in_boot_request = false;
	pw_worker_baseline_end(false); /* after the script's request shutdown */
}

/* A worker script run as one request of its own (a debugger's or profiler's request):
 * its frankenphp_handle_request() runs the handler once, on the request already started
 * with the script, then returns false so the script ends and the request shuts down as
 * a classic one does. */
static __thread enum { PW_ONE_SHOT_NONE, PW_ONE_SHOT_PENDING, PW_ONE_SHOT_SERVED } pw_one_shot;

void pw_one_shot_begins(void)
{
	pw_one_shot = PW_ONE_SHOT_PENDING;
}

void pw_one_shot_ends(void)
{
	pw_one_shot = PW_ONE_SHOT_NONE;
}

/* Runs frankenphp_handle_request()'s handler on the request started for it. An uncaught
 * exception ends the request and the script, like a fatal error: its message goes to
 * the client, then PHP unwinds to the end of the script, where the thread finishes the
 * request with a 500. True after exit(): it ends the script with the request still in
 * flight, and what its shutdown functions and destructors print goes to this request's
 * client (Symfony's dd() relies on it), as under php-fpm and FrankenPHP; the request is
 * answered after that shutdown, failed: a 500 unless the script chose a status or its
 * response already left. */
static bool pw_run_handler(zend_fcall_info *fci, zend_fcall_info_cache *fcc)
{
	zval retval;
	ZVAL_UNDEF(&retval);
	fci->retval = &retval;
	if (zend_call_function(fci, fcc) == SUCCESS) {
		zval_ptr_dtor(&retval);
	}
	if (!EG(exception)) {
		return false;
	}
	if (!zend_is_unwind_exit(EG(exception)) && !zend_is_graceful_exit(EG(exception))) {
		zend_exception_error(EG(exception), E_ERROR);
		zend_bailout();
	}
	if (!SG(headers_sent) && SG(sapi_headers).http_response_code == 200) {
		SG(sapi_headers).http_response_code = 500;
	}
	return true;
}

/* frankenphp_handle_request() in a one-shot run: the handler on the script's own request
 * the first time, false after. Its exceptions are the request's, as in a classic
 * script: an uncaught one is a fatal error, exit() ends the script. */
static void pw_one_shot_handle(zend_fcall_info *fci, zend_fcall_info_cache *fcc, zval *return_value)
{
	if (pw_one_shot != PW_ONE_SHOT_PENDING) {
		RETURN_FALSE;
	}
	pw_one_shot = PW_ONE_SHOT_SERVED;
	pw_run_handler(fci, fcc);
	RETURN_TRUE;
}

/* An exception still pending after PHP code outside the handler: PHP's "Uncaught ..."
 * error, logged (and shown, with display_errors, if output can still reach the client). */
static void pw_report_pending_exception(void)
{
	if (EG(exception)) {
		zend_try {
			zend_exception_error(EG(exception), E_ERROR);
		} zend_end_try();
		zend_clear_exception();
	}
}

/* Ends the worker script from inside frankenphp_handle_request(): PHP unwinds to the end
 * of the script, where the thread's request shutdown runs against the idle
 * pseudo-request (its output goes to the log), and the thread starts the script again.
 * The request in flight, if any, was answered before. */
static ZEND_NORETURN void pw_abandon_script(void)
{
	pw_shim_request idle;
	pw_rs_worker_idle(&idle);
	pw_fill_request_info(&idle);
	zend_bailout();
}

/* Ends the request in flight: its trimmed shutdown, then its response, failed when
 * `failed` or when the shutdown failed, in which case the script is ended. */
static void pw_end_request(bool failed)
{
	bool ok = pw_worker_request_shutdown();
	if (!ok) {
		pw_report_pending_exception();
	}
	pw_rs_worker_done(failed || !ok, zend_memory_usage(0));
	if (!ok) {
		pw_abandon_script();
	}
}

/* Starts the idle pseudo-request, so code after the worker's loop (and PHP's own
 * request shutdown) runs against an active request whose output goes to the log. */
static bool pw_start_idle_request(void)
{
	pw_shim_request idle;
	pw_rs_worker_idle(&idle);
	return pw_worker_request_startup(&idle);
}

/* What pw_worker_next() found. */
enum pw_next {
	PW_NEXT_RUN,  /* a request (or task) started: run the handler */
	PW_NEXT_DONE, /* a request answered without its handler (its body failed) */
	PW_NEXT_STOP, /* the script must end: the loop function returns false */
};

/* What frankenphp_handle_request() and php_worker_handle_task() do before the handler:
 * end the boot request on the first call, wait for the next request or task, and start
 * it. Does not return when the script must be abandoned. */
static enum pw_next pw_worker_next(pw_shim_request *req)
{
	if (pw_in_boot_request) {
		pw_in_boot_request = false;
		/* What the script set so far is its own: each request's changes go back to it. */
		pw_worker_baseline_capture();
		if (!pw_worker_request_shutdown()) {
			pw_report_pending_exception();
			pw_abandon_script();
		}
	}

	pw_opcache_sample(); /* between requests: no client waits on it */
	bool has_request = pw_rs_worker_wait(req, zend_memory_usage(0), zend_memory_usage(1));
	/* The execution timer kept running while the thread waited (disarming it costs a
	 * syscall per request): re-arm it, and void a timeout it signalled meanwhile, before
	 * any PHP code runs (session handlers can, during startup; the code after the loop
	 * when there is no request). A signal raised before the re-arm is delivered by the
	 * time timer_settime returns. */
	zend_set_timeout(INI_INT("max_execution_time"), 0);
	zend_atomic_bool_store_ex(&EG(timed_out), false);

	if (!pw_worker_request_startup(req)) {
		pw_report_pending_exception();
		if (has_request) {
			pw_rs_worker_done(true, zend_memory_usage(0));
		}
		pw_abandon_script();
	}
	if (!has_request) {
		return PW_NEXT_STOP;
	}
	if (pw_body_failed_at_startup()) {
		/* As in pw_shim_run_script: no handler on part of a form body; 408. */
		pw_end_request(false);
		return PW_NEXT_DONE;
	}
	return PW_NEXT_RUN;
}

/* Throws unless the script runs as a worker of `kind` (PW_WORKER_HTTP or PW_WORKER_TASK),
 * whose loop function is `function`. */
static bool pw_worker_kind_is(int32_t kind, const char *function)
{
	int32_t actual = pw_rs_worker_kind();
	if (actual == kind) {
		return true;
	}
	/* Not in a worker: FrankenPHP's words, which its tests and apps match. */
	const char *why = actual == PW_WORKER_NONE       ? "while not in worker mode"
	                  : actual == PW_WORKER_HTTP     ? "in an HTTP worker, whose loop calls frankenphp_handle_request()"
	                  : actual == PW_WORKER_TASK     ? "in a task worker, whose loop calls php_worker_handle_task()"
	                                                 : "in a background worker, which takes no requests";
	zend_throw_exception_ex(spl_ce_RuntimeException, 0, "%s() called %s", function, why);
	return false;
}

/* The start of frankenphp_handle_request() and php_worker_handle_task() (`function`,
 * the loop of workers of `kind`): true when a request or task started and the handler
 * runs; otherwise the loop function returns what this set (false: the script must end;
 * true: a request answered without its handler), or the exception it threw. */
static bool pw_worker_begin(int32_t kind, const char *function, zval *return_value)
{
	if (!pw_worker_kind_is(kind, function)) {
		return false;
	}
	pw_shim_request req;
	switch (pw_worker_next(&req)) {
	case PW_NEXT_STOP:
		RETVAL_FALSE;
		return false;
	case PW_NEXT_DONE:
		RETVAL_TRUE;
		return false;
	case PW_NEXT_RUN:
		break;
	}
	return true;
}

/* exit() in a task's handler: the task ends (as failed), and the script unwinds after
 * it, its shutdown's output going to the log. */
static void pw_end_request_on_exit(void)
{
	/* Let the request's shutdown run without the pending unwind, then put it back. */
	zend_object *unwind = EG(exception);
	EG(exception) = NULL;
	pw_end_request(true); /* an abandoned script's request shutdown frees `unwind` */
	if (!pw_start_idle_request()) {
		OBJ_RELEASE(unwind);
		pw_report_pending_exception();
		pw_abandon_script();
	}
	EG(exception) = unwind;
}

void pw_php_handle_request(zend_execute_data *execute_data, zval *return_value)
{
	zend_fcall_info fci;
	zend_fcall_info_cache fcc;

	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_FUNC(fci, fcc)
	ZEND_PARSE_PARAMETERS_END();

	if (pw_one_shot != PW_ONE_SHOT_NONE) {
		pw_one_shot_handle(&fci, &fcc, return_value);
		return;
	}
	if (!pw_worker_begin(PW_WORKER_HTTP, "frankenphp_handle_request", return_value)) {
		return;
	}

	if (pw_run_handler(&fci, &fcc)) {
		RETURN_TRUE; /* exit(): the script ends with the request in flight */
	}

	pw_end_request(false);
	RETURN_TRUE;
}

/* A task's handler failed with `why`. */
static void pw_task_failed(zend_string *why)
{
	pw_rs_task_result(SG(server_context), false, ZSTR_VAL(why), ZSTR_LEN(why));
	zend_string_release(why);
}

void pw_php_handle_task(zend_execute_data *execute_data, zval *return_value)
{
	zend_fcall_info fci;
	zend_fcall_info_cache fcc;

	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_FUNC(fci, fcc)
	ZEND_PARSE_PARAMETERS_END();

	if (!pw_worker_begin(PW_WORKER_TASK, "php_worker_handle_task", return_value)) {
		return;
	}

	const char *payload = "";
	size_t len = 0;
	pw_rs_task_payload(SG(server_context), &payload, &len);
	zval arg, retval;
	ZVAL_STRINGL(&arg, payload, len);
	ZVAL_UNDEF(&retval);
	fci.retval = &retval;
	fci.params = &arg;
	fci.param_count = 1;
	zend_call_function(&fci, &fcc);
	zval_ptr_dtor(&arg);

	if (!EG(exception)) {
		if (Z_TYPE(retval) == IS_STRING) {
			pw_rs_task_result(SG(server_context), true, Z_STRVAL(retval), Z_STRLEN(retval));
		} else {
			pw_task_failed(zend_strpprintf(0, "its handler returned %s, not a string", zend_zval_type_name(&retval)));
		}
		zval_ptr_dtor(&retval);
		pw_end_request(false);
		RETURN_TRUE;
	}
	zval_ptr_dtor(&retval);
	if (zend_is_unwind_exit(EG(exception)) || zend_is_graceful_exit(EG(exception))) {
		pw_task_failed(zend_string_init(ZEND_STRL("its handler called exit()"), 0));
		pw_end_request_on_exit();
		RETURN_TRUE;
	}
	/* An exception fails the task, which the sender gets as an exception naming it; the
	 * script goes on with the next task. */
	zend_object *ex = EG(exception);
	zval rv;
	zval *message = zend_read_property_ex(zend_get_exception_base(ex), ex, ZSTR_KNOWN(ZEND_STR_MESSAGE), 1, &rv);
	pw_task_failed(zend_strpprintf(0, "%s: %s", ZSTR_VAL(ex->ce->name),
	                               message && Z_TYPE_P(message) == IS_STRING ? Z_STRVAL_P(message) : ""));
	zend_clear_exception();
	pw_end_request(false);
	RETURN_TRUE;
}
