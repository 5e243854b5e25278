/*
 * The C half of rust-core: the SAPI module and every PHP call that can bail out.
 *
 * PHP reports fatal errors, exit() and timeouts with a longjmp ("bailout"). A longjmp
 * must never cross a Rust frame that owns a destructor, nor any Go frame, so every PHP
 * entry point that can bail out is called from here, inside zend_try. Rust calls the
 * pw_shim_* functions below; PHP calls the SAPI callbacks in shim.c, which forward to
 * the pw_rs_* hooks implemented in Rust (src/sapi.rs). The hooks never call PHP.
 *
 * Threads: pw_shim_engine_* run on the engine's main PHP thread; everything else runs
 * on a PHP thread that called pw_shim_thread_init.
 */
#ifndef PHP_WORKER_SHIM_H
#define PHP_WORKER_SHIM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _zend_execute_data zend_execute_data;
typedef struct _zval_struct zval;

/* One request as PHP needs it. Every string is NUL-terminated, owned by Rust and valid
 * until pw_shim_run_script returns. */
typedef struct pw_shim_request {
	void *ctx; /* the Rust request context, stored in SG(server_context); never NULL */
	const char *method;
	char *request_uri;
	char *query_string;
	const char *content_type;  /* NULL when the request has none */
	char *path_translated;
	const char *script_filename;
	const char *authorization; /* NULL when the request has none */
	int64_t content_length;    /* -1 when unknown (chunked) */
	int proto_num;             /* 1000 for HTTP/1.0, 1001 for HTTP/1.1, 2000 for HTTP/2 */
} pw_shim_request;

/* The variables of one request for $_SERVER, in registration order (later wins):
 * each pair is two (offset, length) spans into block, whose strings are NUL-terminated. */
typedef struct pw_shim_vars {
	const char *block;
	const uint32_t *spans;
	size_t pairs;
} pw_shim_vars;

typedef enum pw_run_result {
	PW_RUN_OK = 0,             /* the script ran; it may have failed the PHP way */
	PW_RUN_STARTUP_FAILED = 1, /* php_request_startup failed; the script did not run */
	PW_RUN_UNHEALTHY = 2,      /* a bailout escaped PHP's own handlers: retire this thread */
} pw_run_result;

/* Starts TSRM, the SAPI and the modules. Returns 0 on success. ini_entries ("key=value\n"
 * lines) must stay valid until pw_shim_engine_shutdown. additional_module is the
 * ext-php-rs module entry with php_worker's PHP functions. env is the process
 * environment every $_SERVER starts with; it is copied. */
int pw_shim_engine_startup(const char *ini_entries, void *additional_module, const pw_shim_vars *env);
void pw_shim_engine_shutdown(void);

/* Gives the calling OS thread its own PHP context, blocks SIGPIPE on it (Go owns
 * SIGPIPE; see os/signal) and names it for ps/top. Pair with pw_shim_thread_shutdown. */
void pw_shim_thread_init(const char *name);
void pw_shim_thread_shutdown(void);

/* Runs a script as one request: request startup, the script, request shutdown. *fatal
 * is set when it ended on a fatal error or an uncaught exception, *exit_status to its
 * exit status. With `worker`, req is the request the worker script sees while it boots,
 * and the script serves HTTP requests through frankenphp_handle_request() until it
 * returns. */
pw_run_result pw_shim_run_script(const pw_shim_request *req, bool worker, bool *fatal, int *exit_status);

/* What it takes to stop the script running on a PHP thread from another thread, the way
 * max_execution_time does: the thread and its execution timer. */
typedef struct pw_kill_slot {
	pthread_t thread;
	void *timer;
} pw_kill_slot;

/* Fills the kill slot of the calling PHP thread (after pw_shim_thread_init). */
void pw_shim_kill_slot(pw_kill_slot *slot);

/* Makes the script on the slot's thread fail with "Maximum execution time exceeded" at
 * its next instruction, interrupting a blocking sleep. Returns false if the signal could
 * not be sent. Safe from any thread while the target thread is alive. */
bool pw_shim_kill(const pw_kill_slot *slot);

/* MINIT of the php_worker module: makes putenv()/getenv() per-thread (see src/env.rs). */
int pw_shim_module_startup(int type, int module_number);

/* The PHP functions of the php_worker module (registered from src/functions.rs). */
void pw_php_handle_request(zend_execute_data *execute_data, zval *return_value);
void pw_php_finish_request(zend_execute_data *execute_data, zval *return_value);
void pw_php_headers_send(zend_execute_data *execute_data, zval *return_value);
void pw_php_request_headers(zend_execute_data *execute_data, zval *return_value);
void pw_php_response_headers(zend_execute_data *execute_data, zval *return_value);

/* Hooks implemented in Rust (src/sapi.rs). ctx is the pw_shim_request.ctx of the request
 * running on the calling thread, or NULL outside a request. None of them calls PHP. */
size_t pw_rs_ub_write(void *ctx, const char *str, size_t len, bool *aborted);
bool pw_rs_flush(void *ctx);
void pw_rs_header(void *ctx, const char *line, size_t len);
void pw_rs_headers_done(void *ctx, int status);
size_t pw_rs_read_post(void *ctx, char *buf, size_t len, bool *aborted);
char *pw_rs_read_cookies(void *ctx);
void pw_rs_server_vars(void *ctx, pw_shim_vars *request);
char *pw_rs_getenv(void *ctx, const char *name, size_t len);
int pw_rs_proto_num(void *ctx);
void pw_rs_log(void *ctx, const char *message, int syslog_level);
/* True when ctx answers an HTTP client (not a worker booting or idle). */
bool pw_rs_is_client(void *ctx);
/* fastcgi_finish_request(): completes the response now; false if already complete. */
bool pw_rs_finish_early(void *ctx);
/* headers_send() with a 1xx status, after pw_rs_header() for each current header. */
bool pw_rs_informational(void *ctx, int status);
/* The request's own variables (not the configured env), for the request-headers function. */
void pw_rs_request_vars(void *ctx, pw_shim_vars *vars);

/* The per-thread environment (src/env.rs). ctx may be NULL. */
/* getenv(name): true and the value (valid during the call), or false. */
bool pw_rs_env_get(void *ctx, const char *name, size_t len, const char **value, size_t *value_len);
/* putenv(setting): "NAME=value" sets, "NAME" unsets; for this thread only. */
void pw_rs_env_put(const char *setting, size_t len);
/* The whole environment as this thread sees it, for getenv() and $_ENV. */
void pw_rs_env_all(void *ctx, pw_shim_vars *vars);

/* Worker-mode hooks (src/worker.rs), called from frankenphp_handle_request(). */
/* True on a thread running a worker script. */
bool pw_rs_worker_active(void);
/* Waits for the next request and fills *req with it: true. When the script must stop
 * (shutdown, max_requests) fills *req with the idle pseudo-request instead: false. */
bool pw_rs_worker_wait(pw_shim_request *req);
/* The request from the last pw_rs_worker_wait() is over; `failed` when it ended on an
 * error or exit() (a 500 unless a response already left). */
void pw_rs_worker_done(bool failed);
/* Fills *req with the idle pseudo-request: output goes to the log. */
void pw_rs_worker_idle(pw_shim_request *req);

#endif
