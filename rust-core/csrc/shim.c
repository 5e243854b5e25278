/*
 * The SAPI module of php_worker and the PHP calls that need zend_try. See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <php_main.h>
#include <php_variables.h>
#include <php_output.h>
#include <php_ini.h>
#include <ext/standard/head.h>
#include <ext/spl/spl_exceptions.h>
#include <Zend/zend_exceptions.h>

#include <pthread.h>
#include <signal.h>

#include "shim.h"

#define PW_FATAL_ERRORS (E_ERROR | E_CORE_ERROR | E_COMPILE_ERROR | E_USER_ERROR | E_PARSE | E_RECOVERABLE_ERROR)

static void *pw_additional_module;

/* ---- SAPI callbacks -------------------------------------------------------------- */

static int pw_sapi_startup(sapi_module_struct *module)
{
	return php_module_startup(module, (zend_module_entry *)pw_additional_module);
}

static int pw_sapi_activate(void)
{
	/* sapi_activate() resets proto_num to 1000 just before calling us. */
	if (SG(server_context)) {
		SG(request_info).proto_num = pw_rs_proto_num(SG(server_context));
	}
	return SUCCESS;
}

static int pw_sapi_deactivate(void)
{
	return SUCCESS;
}

static size_t pw_sapi_ub_write(const char *str, size_t len)
{
	bool aborted = false;
	size_t written = pw_rs_ub_write(SG(server_context), str, len, &aborted);
	if (aborted) {
		/* May bail out (unless ignore_user_abort); we are in C, below PHP's zend_try. */
		php_handle_aborted_connection();
	}
	return written;
}

static void pw_sapi_flush(void *server_context)
{
	if (!server_context) {
		return;
	}
	if (!SG(headers_sent)) {
		sapi_send_headers();
	}
	if (!pw_rs_flush(server_context)) {
		php_handle_aborted_connection();
	}
}

static int pw_sapi_send_headers(sapi_headers_struct *headers)
{
	void *ctx = SG(server_context);
	if (!ctx || SG(request_info).no_headers) {
		return SAPI_HEADER_SENT_SUCCESSFULLY;
	}
	zend_llist_position pos;
	for (sapi_header_struct *h = zend_llist_get_first_ex(&headers->headers, &pos); h;
	     h = zend_llist_get_next_ex(&headers->headers, &pos)) {
		pw_rs_header(ctx, h->header, h->header_len);
	}
	pw_rs_headers_done(ctx, headers->http_response_code ? headers->http_response_code : 200);
	return SAPI_HEADER_SENT_SUCCESSFULLY;
}

static size_t pw_sapi_read_post(char *buf, size_t len)
{
	if (!SG(server_context)) {
		return 0;
	}
	bool aborted = false;
	size_t n = pw_rs_read_post(SG(server_context), buf, len, &aborted);
	if (aborted) {
		/* No bailout here (this can run inside request startup): the script sees
		 * connection_aborted() and stops at its next output, as for a client gone. */
		PG(connection_status) |= PHP_CONNECTION_ABORTED;
	}
	return n;
}

static char *pw_sapi_read_cookies(void)
{
	if (!SG(server_context)) {
		return NULL;
	}
	return pw_rs_read_cookies(SG(server_context));
}

/* The process environment as persistent strings flagged interned, so every thread can
 * put them in its $_SERVER without copying or reference counting. Built at startup,
 * read-only until shutdown. */
static zend_string **pw_env_strings;
static size_t pw_env_pairs;

/* Whether $_SERVER goes through the filter extension's input filter: only when
 * filter.default is configured, as FrankenPHP does; the filter doubles the cost of
 * every variable and only filter_input(INPUT_SERVER) needs it. */
static bool pw_filter_server_vars;

static zend_string *pw_shared_string(const char *s, size_t len)
{
	zend_string *str = zend_string_init(s, len, 1);
	zend_string_hash_val(str);
	GC_ADD_FLAGS(str, IS_STR_INTERNED);
	return str;
}

/* A name PHP would register as is (php_register_variable_ex mangles ' ', '.' and '['). */
static bool pw_plain_name(const char *name, size_t len)
{
	if (len == 0) {
		return false;
	}
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) {
			return false;
		}
	}
	return true;
}

static void pw_build_env_strings(const pw_shim_vars *env)
{
	pw_env_strings = pemalloc(sizeof(zend_string *) * 2 * (env->pairs ? env->pairs : 1), 1);
	pw_env_pairs = 0;
	for (size_t i = 0; i < env->pairs; i++) {
		const uint32_t *s = env->spans + 4 * i;
		if (!pw_plain_name(env->block + s[0], s[1])) {
			continue;
		}
		pw_env_strings[2 * pw_env_pairs] = pw_shared_string(env->block + s[0], s[1]);
		pw_env_strings[2 * pw_env_pairs + 1] = pw_shared_string(env->block + s[2], s[3]);
		pw_env_pairs++;
	}
}

static void pw_free_env_strings(void)
{
	for (size_t i = 0; i < 2 * pw_env_pairs; i++) {
		pefree(pw_env_strings[i], 1);
	}
	if (pw_env_strings) {
		pefree(pw_env_strings, 1);
	}
	pw_env_strings = NULL;
	pw_env_pairs = 0;
}

static void pw_register_request_vars(const pw_shim_vars *vars, zval *track_vars)
{
	HashTable *ht = Z_ARRVAL_P(track_vars);
	for (size_t i = 0; i < vars->pairs; i++) {
		const uint32_t *s = vars->spans + 4 * i;
		const char *name = vars->block + s[0];
		char *value = (char *)vars->block + s[2];
		size_t value_len = s[3];
		if (pw_filter_server_vars) {
			size_t new_len = value_len;
			/* The filter extension keeps a raw copy for filter_input(INPUT_SERVER) and
			 * registers the variable itself, returning 0. */
			if (sapi_module.input_filter(PARSE_SERVER, name, &value, value_len, &new_len)) {
				php_register_variable_safe(name, value, new_len, track_vars);
			}
		} else if (pw_plain_name(name, s[1])) {
			zval zv;
			ZVAL_STRINGL_FAST(&zv, value, value_len);
			zend_hash_str_update(ht, name, s[1], &zv);
		} else {
			php_register_variable_safe(name, value, value_len, track_vars);
		}
	}
}

static void pw_sapi_register_server_variables(zval *track_vars)
{
	void *ctx = SG(server_context);
	if (!ctx) {
		return;
	}
	/* The process environment first, then the request's variables, which win. */
	HashTable *ht = Z_ARRVAL_P(track_vars);
	zend_hash_extend(ht, pw_env_pairs + 64, 0);
	for (size_t i = 0; i < pw_env_pairs; i++) {
		zval zv;
		ZVAL_INTERNED_STR(&zv, pw_env_strings[2 * i + 1]);
		zend_hash_update(ht, pw_env_strings[2 * i], &zv);
	}
	pw_shim_vars request = {0};
	pw_rs_server_vars(ctx, &request);
	pw_register_request_vars(&request, track_vars);
}

static char *pw_sapi_getenv(const char *name, size_t len)
{
	if (!SG(server_context)) {
		return NULL;
	}
	return pw_rs_getenv(SG(server_context), name, len);
}

static void pw_sapi_log_message(const char *message, int syslog_level)
{
	pw_rs_log(SG(server_context), message, syslog_level);
}

static sapi_module_struct pw_sapi_module = {
	"php_worker",                     /* name */
	"php_worker (Caddy)",             /* pretty name */
	pw_sapi_startup,                  /* startup */
	php_module_shutdown_wrapper,      /* shutdown */
	pw_sapi_activate,                 /* activate */
	pw_sapi_deactivate,               /* deactivate */
	pw_sapi_ub_write,                 /* unbuffered write */
	pw_sapi_flush,                    /* flush */
	NULL,                             /* get uid */
	pw_sapi_getenv,                   /* getenv */
	php_error,                        /* error handler */
	NULL,                             /* header handler */
	pw_sapi_send_headers,             /* send headers handler */
	NULL,                             /* send header handler */
	pw_sapi_read_post,                /* read POST data */
	pw_sapi_read_cookies,             /* read Cookies */
	pw_sapi_register_server_variables,/* register server variables */
	pw_sapi_log_message,              /* log message */
	NULL,                             /* get request time */
	NULL,                             /* terminate process */
	STANDARD_SAPI_MODULE_PROPERTIES
};

/* ---- engine and threads ---------------------------------------------------------- */

static void pw_ini_default(HashTable *configuration_hash, const char *name, const char *value)
{
	zval zv;
	ZVAL_NEW_STR(&zv, zend_string_init(value, strlen(value), 1));
	zend_hash_str_update(configuration_hash, name, strlen(name), &zv);
}

/* Defaults under php.ini: a server must not show error details (paths, queries) to its
 * clients, and must log them (PHP's own defaults do the opposite of both), unless
 * php.ini or php_ini says otherwise. */
static void pw_ini_defaults(HashTable *configuration_hash)
{
	pw_ini_default(configuration_hash, "display_errors", "0");
	pw_ini_default(configuration_hash, "log_errors", "1");
}

int pw_shim_engine_startup(const char *ini_entries, void *additional_module, const pw_shim_vars *env)
{
	pw_additional_module = additional_module;
	if (!php_tsrm_startup()) {
		return -1;
	}
	zend_signal_startup();
	sapi_startup(&pw_sapi_module);
	/* sapi_startup() clears ini_entries, so they go in afterwards. */
	pw_sapi_module.ini_entries = (char *)ini_entries;
	pw_sapi_module.php_ini_ignore_cwd = 1;
	pw_sapi_module.ini_defaults = pw_ini_defaults;
	if (pw_sapi_module.startup(&pw_sapi_module) == FAILURE) {
		sapi_shutdown();
		tsrm_shutdown();
		return -1;
	}
	char *default_filter = NULL;
	pw_filter_server_vars = cfg_get_string("filter.default", &default_filter) == SUCCESS && default_filter &&
	                        strcmp(default_filter, "unsafe_raw") != 0;
	pw_build_env_strings(env);
	return 0;
}

void pw_shim_engine_shutdown(void)
{
	pw_sapi_module.shutdown(&pw_sapi_module);
	sapi_shutdown();
	tsrm_shutdown();
	pw_free_env_strings();
	pw_sapi_module.ini_entries = NULL;
}

void pw_shim_thread_init(const char *name)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (name) {
		pthread_setname_np(pthread_self(), name);
	}
	(void)ts_resource(0);
}

void pw_shim_thread_shutdown(void)
{
	ts_free_thread();
}

/* ---- classic requests ------------------------------------------------------------ */

static void pw_fill_request_info(const pw_shim_request *req)
{
	SG(server_context) = req->ctx;
	SG(sapi_headers).http_response_code = 200;
	SG(request_info).request_method = req->method;
	SG(request_info).request_uri = req->request_uri;
	SG(request_info).query_string = req->query_string;
	SG(request_info).content_type = req->content_type;
	SG(request_info).content_length = req->content_length < 0 ? 0 : req->content_length;
	SG(request_info).path_translated = req->path_translated;
	SG(request_info).proto_num = req->proto_num;
	SG(request_info).auth_user = NULL;
	SG(request_info).auth_password = NULL;
	SG(request_info).auth_digest = NULL;
	php_handle_auth_data(req->authorization);
}

static void pw_clear_request_info(void)
{
	SG(request_info).request_method = NULL;
	SG(request_info).request_uri = NULL;
	SG(request_info).query_string = NULL;
	SG(request_info).content_type = NULL;
	SG(request_info).path_translated = NULL;
	SG(request_info).cookie_data = NULL;
	SG(server_context) = NULL;
}

/* Before request shutdown: PHP would read and discard a body the script never read (a
 * PUT it ignored), through the client, on this thread. Go's server discards or closes
 * for us, and a failed read there must not turn a finished response into a 408. */
static void pw_skip_body_drain(void)
{
	SG(post_read) = 1;
}

/* After request startup: PHP parsed the body of a form or upload (sapi_activate reads
 * it) and the client stopped sending, so the connection is already aborted before the
 * script printed anything. */
static bool pw_body_failed_at_startup(void)
{
	return (PG(connection_status) & PHP_CONNECTION_ABORTED) != 0;
}

/* True while the boot pseudo-request of a worker script is active: the first call to
 * frankenphp_handle_request() ends it. */
static __thread bool pw_in_boot_request;

static bool pw_fatal_error_happened(void)
{
	return PG(last_error_message) != NULL && (PG(last_error_type) & PW_FATAL_ERRORS);
}

pw_run_result pw_shim_run_script(const pw_shim_request *req, bool worker, bool *fatal, int *exit_status)
{
	volatile pw_run_result result = PW_RUN_OK;
	*fatal = false;
	*exit_status = 0;

	zend_first_try {
		pw_fill_request_info(req);
		if (php_request_startup() == FAILURE) {
			result = PW_RUN_STARTUP_FAILED;
		} else if (pw_body_failed_at_startup()) {
			/* The form or upload body stopped arriving while PHP parsed it: the script
			 * would run on part of $_POST or $_FILES; the client gets 408 instead. */
		} else {
			zend_file_handle file;
			zend_stream_init_filename(&file, req->script_filename);
			file.primary_script = 1;
			pw_in_boot_request = worker;
			if (worker) {
				/* A client that goes away must not end the worker script (a new boot per
				 * cancelled request); the script can still turn this off. */
				zend_string *name = zend_string_init("ignore_user_abort", sizeof("ignore_user_abort") - 1, 0);
				zend_alter_ini_entry_chars(name, "1", 1, PHP_INI_USER, PHP_INI_STAGE_RUNTIME);
				zend_string_release(name);
			}
			EG(exit_status) = 0;
			php_execute_script(&file);
			zend_destroy_file_handle(&file);
			*fatal = pw_fatal_error_happened();
			*exit_status = EG(exit_status);
		}
		/* Shuts down whichever request is active: the script's own, or for a worker the
		 * idle one, or the HTTP request a fatal error interrupted (which gets the rest of
		 * the output). */
		pw_skip_body_drain();
		php_request_shutdown(NULL);
	} zend_catch {
		result = PW_RUN_UNHEALTHY;
	} zend_end_try();

	pw_in_boot_request = false;
	pw_clear_request_info();
	return result;
}

/* ---- worker mode ----------------------------------------------------------------- */

/* Modules whose per-request state lives past a worker request unless they run their
 * request shutdown and startup hooks around it. */
static const char *const pw_request_modules[] = {"filter", "session", NULL};

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
			module->request_shutdown_func(module->type, module->module_number);
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
	for (int i = 0; i < NUM_TRACK_VARS; i++) {
		zval_ptr_dtor_nogc(&PG(http_globals)[i]);
	}
	/* $_SESSION belongs to the previous request's session. */
	zend_hash_str_del(&EG(symbol_table), ZEND_STRL("_SESSION"));
	php_hash_environment();
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
 * tearing down the script's objects, statics and globals. */
static zend_result pw_worker_request_startup(const pw_shim_request *req)
{
	volatile zend_result result = SUCCESS;
	pw_fill_request_info(req);
	zend_try {
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
		result = FAILURE;
	} zend_end_try();
	SG(sapi_started) = 1;
	return result;
}

/* php_request_shutdown() for one request of a worker: flush and send the response, end
 * the session, free what the request owned (uploaded files, php://input). */
static void pw_worker_request_shutdown(void)
{
	zend_try {
		php_output_end_all();
	} zend_end_try();
	zend_try {
		pw_modules_request_hook(false);
	} zend_end_try();
	zend_try {
		php_output_deactivate();
	} zend_end_try();
	pw_skip_body_drain();
	zend_try {
		sapi_deactivate();
	} zend_end_try();
	pw_clear_request_info();
	zend_set_memory_limit(PG(memory_limit));
}

/* Starts the idle pseudo-request, so code after the worker's loop (and PHP's own
 * request shutdown) runs against an active request whose output goes to the log. */
static void pw_start_idle_request(void)
{
	pw_shim_request idle;
	pw_rs_worker_idle(&idle);
	pw_worker_request_startup(&idle);
}

void pw_php_handle_request(zend_execute_data *execute_data, zval *return_value)
{
	zend_fcall_info fci;
	zend_fcall_info_cache fcc;

	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_FUNC(fci, fcc)
	ZEND_PARSE_PARAMETERS_END();

	if (!pw_rs_worker_active()) {
		zend_throw_exception(spl_ce_RuntimeException,
		                     "frankenphp_handle_request() called while not in worker mode", 0);
		RETURN_THROWS();
	}
	if (pw_in_boot_request) {
		pw_worker_request_shutdown();
		pw_in_boot_request = false;
	}

	pw_shim_request req;
	bool has_request = pw_rs_worker_wait(&req);
	if (pw_worker_request_startup(&req) == FAILURE) {
		if (has_request) {
			pw_rs_worker_done(true);
		}
		RETURN_FALSE;
	}
	if (!has_request) {
		RETURN_FALSE;
	}
	if (pw_body_failed_at_startup()) {
		/* As in pw_shim_run_script: no handler on part of a form body; 408. */
		pw_worker_request_shutdown();
		pw_rs_worker_done(false);
		RETURN_TRUE;
	}
	/* The execution timer kept running while the thread waited (disarming it costs a
	 * syscall per request); re-arm it, and void a timeout it signalled meanwhile. A
	 * signal raised before the re-arm is delivered by the time timer_settime returns. */
	zend_set_timeout(INI_INT("max_execution_time"), 0);
	zend_atomic_bool_store_ex(&EG(timed_out), false);

	zval retval;
	ZVAL_UNDEF(&retval);
	fci.retval = &retval;
	if (zend_call_function(&fci, &fcc) == SUCCESS) {
		zval_ptr_dtor(&retval);
	}

	bool exited = false;
	if (EG(exception)) {
		if (!zend_is_unwind_exit(EG(exception)) && !zend_is_graceful_exit(EG(exception))) {
			/* An uncaught exception ends the request and the script, like a fatal
			 * error: its message goes to the client, then PHP unwinds to the end of
			 * the script, where the thread finishes the request with a 500. */
			zend_exception_error(EG(exception), E_ERROR);
			zend_bailout();
		}
		exited = true;
	}

	if (exited) {
		/* exit() unwinds the script after this request: let its request shutdown run
		 * without the pending unwind, then put it back. */
		zend_object *unwind = EG(exception);
		EG(exception) = NULL;
		pw_worker_request_shutdown();
		pw_rs_worker_done(true);
		pw_start_idle_request();
		EG(exception) = unwind;
		RETURN_TRUE;
	}
	pw_worker_request_shutdown();
	pw_rs_worker_done(false);
	RETURN_TRUE;
}

/* ---- other PHP functions --------------------------------------------------------- */

void pw_php_finish_request(zend_execute_data *execute_data, zval *return_value)
{
	ZEND_PARSE_PARAMETERS_NONE();

	void *ctx = SG(server_context);
	if (!ctx || !pw_rs_is_client(ctx)) {
		RETURN_FALSE;
	}
	php_output_end_all();
	php_header();
	RETURN_BOOL(pw_rs_finish_early(ctx));
}

static void pw_forward_headers(void *ctx)
{
	zend_llist_position pos;
	for (sapi_header_struct *h = zend_llist_get_first_ex(&SG(sapi_headers).headers, &pos); h;
	     h = zend_llist_get_next_ex(&SG(sapi_headers).headers, &pos)) {
		pw_rs_header(ctx, h->header, h->header_len);
	}
}

void pw_php_headers_send(zend_execute_data *execute_data, zval *return_value)
{
	zend_long status = 200;

	ZEND_PARSE_PARAMETERS_START(0, 1)
		Z_PARAM_OPTIONAL
		Z_PARAM_LONG(status)
	ZEND_PARSE_PARAMETERS_END();

	if (status >= 100 && status < 200) {
		void *ctx = SG(server_context);
		if (!ctx || SG(headers_sent) || !pw_rs_is_client(ctx)) {
			RETURN_LONG(SAPI_HEADER_SEND_FAILED);
		}
		pw_forward_headers(ctx);
		RETURN_LONG(pw_rs_informational(ctx, (int)status) ? SAPI_HEADER_SENT_SUCCESSFULLY : SAPI_HEADER_SEND_FAILED);
	}
	SG(sapi_headers).http_response_code = (int)status;
	RETURN_LONG(sapi_send_headers());
}

void pw_php_request_headers(zend_execute_data *execute_data, zval *return_value)
{
	ZEND_PARSE_PARAMETERS_NONE();

	array_init(return_value);
	void *ctx = SG(server_context);
	if (!ctx || !pw_rs_is_client(ctx)) {
		return;
	}
	pw_shim_vars vars = {0};
	pw_rs_request_vars(ctx, &vars);
	char name[256];
	for (size_t i = 0; i < vars.pairs; i++) {
		const uint32_t *s = vars.spans + 4 * i;
		const char *var = vars.block + s[0];
		size_t len = s[1];
		if (len <= 5 || len - 5 >= sizeof(name) || strncmp(var, "HTTP_", 5) != 0) {
			continue;
		}
		/* HTTP_X_FORWARDED_FOR -> X-Forwarded-For */
		bool word_start = true;
		for (size_t j = 5; j < len; j++) {
			char c = var[j];
			if (c == '_') {
				name[j - 5] = '-';
				word_start = true;
			} else {
				name[j - 5] = word_start ? c : (char)tolower((unsigned char)c);
				word_start = false;
			}
		}
		add_assoc_stringl_ex(return_value, name, len - 5, (char *)vars.block + s[2], s[3]);
	}
}

void pw_php_response_headers(zend_execute_data *execute_data, zval *return_value)
{
	ZEND_PARSE_PARAMETERS_NONE();

	array_init(return_value);
	zend_llist_position pos;
	for (sapi_header_struct *h = zend_llist_get_first_ex(&SG(sapi_headers).headers, &pos); h;
	     h = zend_llist_get_next_ex(&SG(sapi_headers).headers, &pos)) {
		const char *colon = memchr(h->header, ':', h->header_len);
		if (!colon) {
			continue;
		}
		size_t name_len = colon - h->header;
		while (name_len && (h->header[name_len - 1] == ' ' || h->header[name_len - 1] == '\t')) {
			name_len--;
		}
		if (!name_len) {
			continue;
		}
		const char *value = colon + 1;
		const char *end = h->header + h->header_len;
		while (value < end && (*value == ' ' || *value == '\t')) {
			value++;
		}
		add_assoc_stringl_ex(return_value, h->header, name_len, (char *)value, end - value);
	}
}

/* ---- a per-thread environment ------------------------------------------------------ */

/* putenv() and getenv() act on one process-wide environment, which threads cannot share
 * safely (setenv() while another thread reads it is undefined): Laravel's Dotenv calls
 * putenv() on every worker thread at boot. php_worker gives each thread its own view:
 * the process environment at engine start, the request's env, and its own putenv()s. */

static void pw_php_putenv(zend_execute_data *execute_data, zval *return_value)
{
	char *setting;
	size_t len;

	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_STRING(setting, len)
	ZEND_PARSE_PARAMETERS_END();

	if (len == 0 || setting[0] == '=') {
		zend_argument_value_error(1, "must have a valid syntax");
		RETURN_THROWS();
	}
	pw_rs_env_put(setting, len);
	RETURN_TRUE;
}

static void pw_php_getenv(zend_execute_data *execute_data, zval *return_value)
{
	char *name = NULL;
	size_t name_len = 0;
	bool local_only = 0;

	ZEND_PARSE_PARAMETERS_START(0, 2)
		Z_PARAM_OPTIONAL
		Z_PARAM_STRING_OR_NULL(name, name_len)
		Z_PARAM_BOOL(local_only)
	ZEND_PARSE_PARAMETERS_END();
	(void)local_only;

	if (!name) {
		array_init(return_value);
		php_import_environment_variables(return_value);
		return;
	}
	const char *value;
	size_t value_len;
	if (pw_rs_env_get(SG(server_context), name, name_len, &value, &value_len)) {
		RETURN_STRINGL(value, value_len);
	}
	RETURN_FALSE;
}

/* Fills $_ENV and getenv()'s array. */
static void pw_import_environment(zval *array)
{
	pw_shim_vars vars = {0};
	pw_rs_env_all(SG(server_context), &vars);
	for (size_t i = 0; i < vars.pairs; i++) {
		const uint32_t *s = vars.spans + 4 * i;
		zval value;
		ZVAL_STRINGL(&value, vars.block + s[2], s[3]);
		zend_hash_str_update(Z_ARRVAL_P(array), vars.block + s[0], s[1], &value);
	}
}

static void pw_override_function(const char *name, zif_handler handler)
{
	zend_function *func = zend_hash_str_find_ptr(CG(function_table), name, strlen(name));
	if (func && func->type == ZEND_INTERNAL_FUNCTION) {
		func->internal_function.handler = handler;
	}
}

int pw_shim_module_startup(int type, int module_number)
{
	pw_override_function("putenv", pw_php_putenv);
	pw_override_function("getenv", pw_php_getenv);
	php_import_environment_variables = pw_import_environment;
	return SUCCESS;
}

/* ---- stopping a stuck script ------------------------------------------------------- */

void pw_shim_kill_slot(pw_kill_slot *slot)
{
	slot->thread = pthread_self();
	slot->timer = &EG(max_execution_timer_timer);
}

bool pw_shim_kill(const pw_kill_slot *slot)
{
	/* PHP's timeout handler only acts on signals that carry this thread's timer. */
	union sigval value;
	value.sival_ptr = slot->timer;
	return pthread_sigqueue(slot->thread, SIGRTMIN, value) == 0;
}
