/*
 * The SAPI callbacks: what PHP calls while a request runs, for its output, headers,
 * body, cookies, $_SERVER, getenv() and log lines, forwarded to the Rust hooks; engine.c
 * names them in the SAPI module it starts PHP with. And what they need from the start
 * of the engine: the process environment every $_SERVER starts with, and PHP's error
 * callback chained so a log line keeps the error's parts. C because PHP calls these
 * with its own types, and some end in a bailout (a client gone). See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <php_main.h>
#include <php_variables.h>
#include <php_ini.h>

#include "shim.h"

int pw_sapi_activate(void)
{
	/* sapi_activate() resets proto_num to 1000 just before calling us. */
	if (SG(server_context)) {
		SG(request_info).proto_num = pw_rs_proto_num(SG(server_context));
	}
	return SUCCESS;
}

int pw_sapi_deactivate(void)
{
	return SUCCESS;
}

size_t pw_sapi_ub_write(const char *str, size_t len)
{
	bool aborted = false;
	size_t written = pw_rs_ub_write(SG(server_context), str, len, &aborted);
	if (aborted) {
		/* May bail out (unless ignore_user_abort); we are in C, below PHP's zend_try. */
		php_handle_aborted_connection();
	}
	return written;
}

void pw_sapi_flush(void *server_context)
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

static void pw_forward_header(const char *line, size_t len, void *ctx)
{
	pw_rs_header(ctx, line, len);
}

void pw_forward_headers(void *ctx)
{
	pw_each_response_header(pw_forward_header, ctx);
}

int pw_sapi_send_headers(sapi_headers_struct *headers)
{
	void *ctx = SG(server_context);
	if (!ctx || SG(request_info).no_headers) {
		return SAPI_HEADER_SENT_SUCCESSFULLY;
	}
	/* PHP passes its own SG(sapi_headers). */
	pw_forward_headers(ctx);
	pw_rs_headers_done(ctx, headers->http_response_code ? headers->http_response_code : 200);
	return SAPI_HEADER_SENT_SUCCESSFULLY;
}

size_t pw_sapi_read_post(char *buf, size_t len)
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

char *pw_sapi_read_cookies(void)
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
		pw_pair p = pw_vars_pair(env, i);
		if (!pw_plain_name(p.name, p.name_len)) {
			continue;
		}
		pw_env_strings[2 * pw_env_pairs] = pw_shared_string(p.name, p.name_len);
		pw_env_strings[2 * pw_env_pairs + 1] = pw_shared_string(p.value, p.value_len);
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
		pw_pair p = pw_vars_pair(vars, i);
		const char *name = p.name;
		char *value = (char *)p.value;
		size_t value_len = p.value_len;
		if (pw_filter_server_vars) {
			size_t new_len = value_len;
			/* The filter extension keeps a raw copy for filter_input(INPUT_SERVER) and
			 * registers the variable itself, returning 0. */
			if (sapi_module.input_filter(PARSE_SERVER, name, &value, value_len, &new_len)) {
				php_register_variable_safe(name, value, new_len, track_vars);
			}
		} else if (pw_plain_name(name, p.name_len)) {
			zval zv;
			ZVAL_STRINGL_FAST(&zv, value, value_len);
			zend_hash_str_update(ht, name, p.name_len, &zv);
		} else {
			php_register_variable_safe(name, value, value_len, track_vars);
		}
	}
}

void pw_sapi_register_server_variables(zval *track_vars)
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
	pw_shim_vars request = {0}, env = {0};
	pw_rs_server_vars(ctx, &request, &env);
	pw_register_request_vars(&request, track_vars);
	/* A worker pool's env, sent once for the pool: env wins over CGI variables and
	 * headers; the request's own env (a site's, for a global worker) wins over it. */
	pw_shim_vars inherited = {0};
	pw_rs_inherited_env(ctx, &inherited);
	pw_register_request_vars(&inherited, track_vars);
	pw_register_request_vars(&env, track_vars);
}

/* PHP's own lookups (sapi_getenv) see what getenv() sees: the one path, in Rust. */
char *pw_sapi_getenv(const char *name, size_t len)
{
	const char *value;
	size_t value_len;
	return pw_rs_env_get(SG(server_context), name, len, &value, &value_len) ? (char *)value : NULL;
}

/* The PHP error being reported on this thread, while PHP's error callback runs: PHP
 * hands the SAPI only its formatted line, and the log wants the parts. */
static __thread const pw_php_log_line *pw_reported_error;
static void (*pw_php_error_cb)(int type, zend_string *file, const uint32_t line, zend_string *message);

static void pw_error_cb(int type, zend_string *file, const uint32_t line, zend_string *message)
{
	pw_php_log_line error = {
		.type = type,
		.message = ZSTR_VAL(message),
		.message_len = ZSTR_LEN(message),
		.file = file ? ZSTR_VAL(file) : NULL,
		.file_len = file ? ZSTR_LEN(file) : 0,
		.line = line,
	};
	const pw_php_log_line *outer = pw_reported_error;
	pw_reported_error = &error;
	/* Fatal errors bail out of PHP's callback: forget this one before passing it on. */
	zend_try {
		pw_php_error_cb(type, file, line, message);
	} zend_catch {
		pw_reported_error = outer;
		zend_bailout();
	} zend_end_try();
	pw_reported_error = outer;
}

void pw_sapi_log_message(const char *message, int syslog_level)
{
	if (pw_reported_error) {
		pw_rs_log(SG(server_context), message, syslog_level, pw_reported_error);
		return;
	}
	/* error_log() and other direct lines: the calling script's place, if one runs. */
	pw_php_log_line line = { .type = 0, .message = message, .message_len = strlen(message) };
	zend_string *file = zend_get_executed_filename_ex();
	if (file) {
		line.file = ZSTR_VAL(file);
		line.file_len = ZSTR_LEN(file);
		line.line = zend_get_executed_lineno();
	}
	pw_rs_log(SG(server_context), message, syslog_level, &line);
}

void pw_sapi_engine_started(const pw_shim_vars *env)
{
	if (zend_error_cb != pw_error_cb) { /* zend_startup() sets PHP's own at every start */
		pw_php_error_cb = zend_error_cb;
		zend_error_cb = pw_error_cb;
	}
	char *default_filter = NULL;
	pw_filter_server_vars = cfg_get_string("filter.default", &default_filter) == SUCCESS && default_filter &&
	                        strcmp(default_filter, "unsafe_raw") != 0;
	pw_build_env_strings(env);
}

void pw_sapi_engine_stopped(void)
{
	pw_free_env_strings();
}
