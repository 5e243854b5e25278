/*
 * The SAPI module of php_worker and the PHP calls that need zend_try. See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <php_main.h>
#include <php_variables.h>
#include <php_output.h>
#include <ext/standard/info.h>

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
	return pw_rs_read_post(SG(server_context), buf, len);
}

static char *pw_sapi_read_cookies(void)
{
	if (!SG(server_context)) {
		return NULL;
	}
	return pw_rs_read_cookies(SG(server_context));
}

static void pw_register_pairs(const pw_shim_vars *vars, zval *track_vars, bool filter)
{
	for (size_t i = 0; i < vars->pairs; i++) {
		const uint32_t *s = vars->spans + 4 * i;
		const char *name = vars->block + s[0];
		char *value = (char *)vars->block + s[2];
		size_t value_len = s[3];
		if (filter) {
			size_t new_len = value_len;
			/* The filter extension keeps a raw copy for filter_input(INPUT_SERVER) and
			 * registers the variable itself, returning 0. */
			if (!sapi_module.input_filter(PARSE_SERVER, name, &value, value_len, &new_len)) {
				continue;
			}
			value_len = new_len;
		}
		php_register_variable_safe(name, value, value_len, track_vars);
	}
}

static void pw_sapi_register_server_variables(zval *track_vars)
{
	void *ctx = SG(server_context);
	if (!ctx) {
		return;
	}
	pw_shim_vars env = {0}, request = {0};
	pw_rs_server_vars(ctx, &env, &request);
	/* The process environment first, then the request's variables, which win. */
	pw_register_pairs(&env, track_vars, false);
	pw_register_pairs(&request, track_vars, true);
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

int pw_shim_engine_startup(const char *ini_entries, void *additional_module)
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
	if (pw_sapi_module.startup(&pw_sapi_module) == FAILURE) {
		sapi_shutdown();
		tsrm_shutdown();
		return -1;
	}
	return 0;
}

void pw_shim_engine_shutdown(void)
{
	pw_sapi_module.shutdown(&pw_sapi_module);
	sapi_shutdown();
	tsrm_shutdown();
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

static bool pw_fatal_error_happened(void)
{
	return PG(last_error_message) != NULL && (PG(last_error_type) & PW_FATAL_ERRORS);
}

pw_run_result pw_shim_run_script(const pw_shim_request *req, bool *fatal)
{
	volatile pw_run_result result = PW_RUN_OK;
	*fatal = false;

	zend_first_try {
		pw_fill_request_info(req);
		if (php_request_startup() == FAILURE) {
			result = PW_RUN_STARTUP_FAILED;
		} else {
			zend_file_handle file;
			zend_stream_init_filename(&file, req->script_filename);
			file.primary_script = 1;
			php_execute_script(&file);
			zend_destroy_file_handle(&file);
			*fatal = pw_fatal_error_happened();
		}
		php_request_shutdown(NULL);
	} zend_catch {
		result = PW_RUN_UNHEALTHY;
	} zend_end_try();

	pw_clear_request_info();
	return result;
}
