/*
 * PHP threads and the classic request cycle: a thread's PHP context, the request info
 * PHP reads, running a script as one request, and stopping a stuck one. See shim.h.
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
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
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
	/* The VM calls zend_interrupt_function (pw_interrupt, functions.c) at its next
	 * instruction; the flag is atomic, as PHP's own timer handler needs. */
	zend_atomic_bool_store((zend_atomic_bool *)slot->vm_interrupt, true);
}

void pw_fill_request_info(const pw_shim_request *req)
{
	SG(server_context) = req->ctx;
	SG(sapi_headers).http_response_code = 200;
	SG(request_info).request_method = req->method;
	SG(request_info).request_uri = (char *)req->request_uri;
	SG(request_info).query_string = (char *)req->query_string;
	SG(request_info).content_type = req->content_type;
	SG(request_info).content_length = req->content_length < 0 ? 0 : req->content_length;
	SG(request_info).path_translated = (char *)req->path_translated;
	SG(request_info).argc = req->argc;
	SG(request_info).argv = (char **)req->argv;
	pw_crash_trail_request(req->script_filename);
	SG(request_info).auth_user = NULL;
	SG(request_info).auth_password = NULL;
	SG(request_info).auth_digest = NULL;
	php_handle_auth_data(req->authorization);
}

void pw_clear_request_info(void)
{
	SG(request_info).request_method = NULL;
	SG(request_info).request_uri = NULL;
	SG(request_info).query_string = NULL;
	SG(request_info).content_type = NULL;
	SG(request_info).path_translated = NULL;
	SG(request_info).cookie_data = NULL;
	SG(request_info).argc = 0;
	SG(request_info).argv = NULL;
	SG(server_context) = NULL;
	pw_crash_trail_request(NULL);
}

/* PHP would read and discard a body the script never read (a PUT it ignored), through
 * the client, on this thread. Go's server discards or closes for us, and a failed read
 * there must not turn a finished response into a 408. */
void pw_skip_body_drain(void)
{
	SG(post_read) = 1;
}

/* PHP parsed the body of a form or upload (sapi_activate reads it) and the client
 * stopped sending, so the connection is already aborted before the script printed
 * anything. */
bool pw_body_failed_at_startup(void)
{
	return (PG(connection_status) & PHP_CONNECTION_ABORTED) != 0;
}

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

int64_t pw_shim_post_max_size(void)
{
	/* The main thread's copy of the SAPI globals, set from php.ini and php_ini at startup;
	 * post_max_size is PHP_INI_PERDIR, so no script changes it later. */
	return (int64_t)SG(post_max_size);
}
