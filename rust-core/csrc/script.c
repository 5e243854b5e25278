/*
 * A script run as one request: PHP's full request startup, the script, and PHP's
 * request shutdown, inside zend_first_try. It runs a classic request, a worker script
 * (which then serves its requests from inside, worker.c), a background script or job,
 * and a worker script run for one request (a one-shot run). C because every step can
 * bail out. See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <php_main.h>

#include "shim.h"

static bool pw_fatal_error_happened(void)
{
	return PG(last_error_message) != NULL && (PG(last_error_type) & PW_FATAL_ERRORS);
}

pw_run_result pw_shim_run_script(const pw_shim_request *req, pw_run_mode mode, pw_run_outcome *outcome)
{
	volatile pw_run_result result = PW_RUN_RESULT_OK;
	bool worker = mode == PW_RUN_MODE_WORKER;
	/* A command line ($argv, $argc) is registered the way the CLI does. */
	volatile bool argc_argv = PG(register_argc_argv);
	outcome->fatal = false;
	outcome->exit_status = 0;
	outcome->memory = 0;
	pw_stop_callback_forget();

	zend_first_try {
		pw_fill_request_info(req);
		if (req->argc > 0) {
			PG(register_argc_argv) = 1;
		}
		if (php_request_startup() == FAILURE) {
			/* A bailout during startup (memory_limit while PHP parsed a form body or read
			 * the session, say), caught by PHP. */
			result = PW_RUN_RESULT_STARTUP_FAILED;
		} else if (pw_body_failed_at_startup()) {
			/* The form or upload body stopped arriving while PHP parsed it: the script
			 * would run on part of $_POST or $_FILES; the client gets 408 instead. */
		} else {
			zend_file_handle file;
			zend_stream_init_filename(&file, req->script_filename);
			file.primary_script = 1;
			if (worker) {
				pw_worker_script_begins();
			}
			if (mode == PW_RUN_MODE_BACKGROUND) {
				/* A loop of its own, or a job: no time limit, and a first line #!/usr/bin/env
				 * php (artisan's) skipped, as for the CLI. */
				zend_string *name = zend_string_init("max_execution_time", sizeof("max_execution_time") - 1, 0);
				zend_alter_ini_entry_chars(name, "0", 1, PHP_INI_SYSTEM, PHP_INI_STAGE_RUNTIME);
				zend_string_release(name);
				CG(skip_shebang) = 1;
			}
			if ((mode == PW_RUN_MODE_WORKER || mode == PW_RUN_MODE_BACKGROUND) && pw_rs_worker_revalidates_opcache()) {
				pw_opcache_revalidate();
				pw_rs_worker_opcache_revalidated();
			}
			EG(exit_status) = 0;
			if (mode == PW_RUN_MODE_ONE_SHOT_WORKER) {
				pw_one_shot_begins();
			}
			php_execute_script(&file);
			zend_destroy_file_handle(&file);
			outcome->fatal = pw_fatal_error_happened();
			outcome->exit_status = EG(exit_status);
			if (mode == PW_RUN_MODE_REQUEST) {
				pw_opcache_sample();
			}
		}
		outcome->memory = zend_memory_usage(0);
		/* Shuts down whichever request is active: the script's own, or for a worker the
		 * idle one, or the HTTP request a fatal error interrupted (which gets the rest of
		 * the output). */
		if (worker) {
			/* Before the shutdown reads what the script changed at boot (its locale,
			 * its umask) to put it back, as a classic request's end does. */
			pw_worker_baseline_end(true);
		}
		pw_skip_body_drain();
		php_request_shutdown(NULL);
		/* A fatal error during request shutdown (in an output handler or a shutdown
		 * function) failed the request too. It bailed out, and set the exit status to
		 * 255; exit() there bails out too but is no failure. */
		outcome->fatal = outcome->fatal || (CG(unclean_shutdown) && EG(exit_status) == 255);
	} zend_catch {
		result = PW_RUN_RESULT_UNHEALTHY;
	} zend_end_try();

	if (worker) {
		pw_worker_script_ended();
	}
	pw_one_shot_ends();
	PG(register_argc_argv) = argc_argv;
	pw_clear_request_info();
	/* Freed by the request's shutdown, or gone with a bailout that escaped it. */
	pw_stop_callback_forget();
	return result;
}
