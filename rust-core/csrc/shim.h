/*
 * The C half of rust-core: the SAPI module and every PHP call that can bail out.
 *
 * PHP reports fatal errors, exit() and timeouts with a longjmp ("bailout"). A longjmp
 * must never cross a Rust frame that owns a destructor, nor any Go frame, so every PHP
 * entry point that can bail out is called from these files, inside zend_try. Rust calls
 * the pw_shim_* functions; PHP calls the SAPI callbacks and PHP functions here, which
 * forward to the pw_rs_* hooks implemented in Rust. The hooks never call PHP. Both
 * directions are declared in pw_seam.h, generated from the Rust side.
 *
 * The files, in the order they run (each says what runs in it):
 *   engine.c          the engine's start and stop: TSRM, the SAPI module, php.ini defaults
 *   module.c          the php_worker module: its startup and its function table
 *   thread.c          a PHP thread's life: its PHP context, got and freed
 *   script.c          a script run as one request: full startup, the script, full shutdown
 *   request.c         a request's start and end, as both cycles need them; the module's
 *                     hooks at the end of every request
 *   sapi.c            the SAPI callbacks PHP calls while a request runs
 *   functions.c       the PHP functions about the request, and getenv()/putenv() per thread
 *   worker.c          the worker loop: frankenphp_handle_request(), php_worker_handle_task()
 *   worker_request.c  the trimmed start and end of each request a worker script serves
 *   worker_reset.c    what a worker request leaves in the engine and the extensions,
 *                     put back before the next (and the worker's baseline)
 *   task.c            sending a task to a task worker: php_worker_task(), php_worker_tasks()
 *   store.c           the stores' PHP functions, and PHP values encoded for Rust
 *   opcache.c         OPcache's thread hook, forwarded to Rust; revalidation and samples
 *   interrupt.c       reaching a running script from another thread, and the interrupt hook
 *   profile.c         the profiler's sample, taken at an interrupt
 *   stop.c            how a script learns it must stop; its php_worker_on_stop() callback
 *                     and pcntl_signal() handlers
 *   crash.c           the line a fatal signal on a PHP thread leaves on standard error
 *   cli.c             the command line (`caddy php-cli`), in a process of its own
 *   spawn.c           the programs a PHP thread starts: no signal blocked in them
 * A file calls only files below it in the graph: no file calls back into one that calls
 * it (scripts/check-call-graphs.py checks it).
 *
 * Threads: pw_shim_engine_* and module startup run on the engine's main PHP thread;
 * pw_shim_kill, pw_shim_timed_out and pw_shim_interrupt on any thread; everything else
 * on a PHP thread that called pw_shim_thread_init.
 *
 * This header is internal to csrc/.
 */
#ifndef PW_SHIM_H
#define PW_SHIM_H

#include <php.h>

#include "pw_seam.h"

#define PW_FATAL_ERRORS (E_ERROR | E_CORE_ERROR | E_COMPILE_ERROR | E_USER_ERROR | E_PARSE | E_RECOVERABLE_ERROR)

/* One (name, value) pair of a span list. The list's layout (four u32 per pair: name
 * offset and length, value offset and length, into one block) is read here only. */
typedef struct pw_pair {
	const char *name;
	size_t name_len;
	const char *value;
	size_t value_len;
} pw_pair;

static inline pw_pair pw_vars_pair(const pw_shim_vars *vars, size_t i)
{
	const uint32_t *s = vars->spans + 4 * i;
	return (pw_pair){vars->block + s[0], s[1], vars->block + s[2], s[3]};
}

/* Calls fn with each header line PHP holds for the response (header(), setcookie()), in
 * order: the one walk of SG(sapi_headers). */
static inline void pw_each_response_header(void (*fn)(const char *line, size_t len, void *arg), void *arg)
{
	zend_llist_position pos;
	for (sapi_header_struct *h = zend_llist_get_first_ex(&SG(sapi_headers).headers, &pos); h;
	     h = zend_llist_get_next_ex(&SG(sapi_headers).headers, &pos)) {
		fn(h->header, h->header_len, arg);
	}
}

/* engine.c: a default under php.ini (a SAPI's ini_defaults): one setting, or
 * "key=value\n" lines (NULL: none). The CLI's SAPI uses them too. */
void pw_ini_default(HashTable *configuration_hash, const char *name, const char *value, size_t value_len);
void pw_ini_default_lines(HashTable *configuration_hash, const char *lines);

/* request.c: SG(request_info) and SG(server_context) for a request, and back. */
void pw_fill_request_info(const pw_shim_request *req);
void pw_clear_request_info(void);
/* request.c: before request shutdown: marks the body read so PHP does not drain it. */
void pw_skip_body_drain(void);
/* request.c: after request startup: the form or upload body stopped arriving while PHP
 * parsed it. */
bool pw_body_failed_at_startup(void);
/* request.c: closes a session a failed save handler left open, with its lock. */
void pw_session_release_leaked(void);

/* sapi.c: the SAPI module's callbacks (engine.c's pw_sapi_module names them). */
int pw_sapi_activate(void);
int pw_sapi_deactivate(void);
size_t pw_sapi_ub_write(const char *str, size_t len);
void pw_sapi_flush(void *server_context);
char *pw_sapi_getenv(const char *name, size_t len);
int pw_sapi_send_headers(sapi_headers_struct *headers);
size_t pw_sapi_read_post(char *buf, size_t len);
char *pw_sapi_read_cookies(void);
void pw_sapi_register_server_variables(zval *track_vars);
void pw_sapi_log_message(const char *message, int syslog_level);
/* sapi.c: after the modules started, what the callbacks need (the process environment
 * `env` for $_SERVER, PHP's error callback chained); and its end, after PHP stopped. */
void pw_sapi_engine_started(const pw_shim_vars *env);
void pw_sapi_engine_stopped(void);
/* sapi.c: hands every response header line to Rust, which parses and keeps them. */
void pw_forward_headers(void *ctx);

/* module.c: registers the module named frankenphp, while PHP registers its built-in
 * extensions (engine.c). */
int pw_register_frankenphp_module(void);
/* functions.c, interrupt.c, task.c: their part of the module's startup (module.c). */
void pw_functions_startup(int module_number);
void pw_interrupt_startup(void);
void pw_task_startup(void);

/* worker.c: a worker script starts (its boot pseudo-request is active) or ended. */
void pw_worker_script_begins(void);
void pw_worker_script_ended(void);
/* worker.c: a worker script starts as one request of its own (PW_RUN_MODE_ONE_SHOT_WORKER),
 * or any script ended. */
void pw_one_shot_begins(void);
void pw_one_shot_ends(void);

/* worker_request.c: the trimmed request startup and shutdown around each request of a
 * worker script; false when PHP is unfit to go on with the script. */
bool pw_worker_request_startup(const pw_shim_request *req);
bool pw_worker_request_shutdown(void);

/* worker_reset.c: a worker script's baseline (what it left before its first
 * frankenphp_handle_request()) taken at that call, and freed before the script's final
 * request shutdown (request_memory_alive: its references into the script's request
 * memory are released) or after it, on the paths that skip that (they are only
 * forgotten); the extensions' request hooks a worker request runs; putting the engine's
 * and extensions' state back after each request (see the top of worker_reset.c). */
void pw_worker_baseline_capture(void);
void pw_worker_baseline_end(bool request_memory_alive);
void pw_worker_reset_modules_startup(void);
void pw_worker_reset_modules_shutdown(void);
void pw_worker_reset_request_state(void);
/* worker_reset.c: at engine start, on its main thread: learns the loaded extensions'
 * request hooks, and warns about each one worker mode does not know. */
void pw_worker_reset_engine_started(void);

/* opcache.c: has OPcache drop every cached script whose file changed since it was
 * cached (every script when opcache.validate_timestamps is off); for the first boot of a
 * worker generation. Runs PHP functions: call inside a request. */
void pw_opcache_revalidate(void);
/* opcache.c: samples OPcache's memory and hit counters for the engine's snapshot, when
 * due; calls no PHP, so it cannot bail out. */
void pw_opcache_sample(void);

/* profile.c: takes the profiler's sample if this thread has weight pending. */
void pw_profile_interrupt(void);

/* stop.c: at an interrupt, runs the php_worker_on_stop() callback if the thread was told
 * to stop; at a request's end, frees it (release) or, when its memory is already gone,
 * forgets it without freeing (forget). */
void pw_stop_callback_run(void);
void pw_stop_callback_release(void);
void pw_stop_callback_forget(void);

/* spawn.c: the calling PHP thread blocked the host's signals; the programs it starts
 * (popen(), posix_spawn()) get an empty signal mask. */
void pw_spawn_thread_blocks_signals(void);

/* crash.c: the calling thread gets (begins) or loses (ends) its PHP context. */
void pw_crash_trail_thread_begins(void);
void pw_crash_trail_thread_ends(void);
/* crash.c: the script of the request the thread runs now (NULL between requests). */
void pw_crash_trail_request(const char *script);

/* The PHP functions of the php_worker module, in its function table (module.c). */
/* worker.c */
void pw_php_handle_request(zend_execute_data *execute_data, zval *return_value);
void pw_php_handle_task(zend_execute_data *execute_data, zval *return_value);
/* functions.c */
void pw_php_finish_request(zend_execute_data *execute_data, zval *return_value);
void pw_php_headers_send(zend_execute_data *execute_data, zval *return_value);
void pw_php_request_headers(zend_execute_data *execute_data, zval *return_value);
void pw_php_response_headers(zend_execute_data *execute_data, zval *return_value);
void pw_php_frankenphp_log(zend_execute_data *execute_data, zval *return_value);
/* stop.c */
void pw_php_stopping(zend_execute_data *execute_data, zval *return_value);
void pw_php_wait_stop(zend_execute_data *execute_data, zval *return_value);
void pw_php_on_stop(zend_execute_data *execute_data, zval *return_value);
void pw_php_pcntl_signal(zend_execute_data *execute_data, zval *return_value);
/* task.c */
void pw_php_task(zend_execute_data *execute_data, zval *return_value);
void pw_php_tasks(zend_execute_data *execute_data, zval *return_value);

/* store.c: php_worker_local_* and php_worker_shared_* */
#define PW_STORE_DECLARE(scope)                                                          \
	void pw_php_##scope##_get(zend_execute_data *execute_data, zval *return_value);       \
	void pw_php_##scope##_put(zend_execute_data *execute_data, zval *return_value);       \
	void pw_php_##scope##_add(zend_execute_data *execute_data, zval *return_value);       \
	void pw_php_##scope##_increment(zend_execute_data *execute_data, zval *return_value); \
	void pw_php_##scope##_touch(zend_execute_data *execute_data, zval *return_value);     \
	void pw_php_##scope##_forget(zend_execute_data *execute_data, zval *return_value);    \
	void pw_php_##scope##_flush(zend_execute_data *execute_data, zval *return_value);     \
	void pw_php_##scope##_count(zend_execute_data *execute_data, zval *return_value);
PW_STORE_DECLARE(local)
PW_STORE_DECLARE(shared)

#endif
