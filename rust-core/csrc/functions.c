/*
 * The PHP functions a request's script calls about its request (finishing it early,
 * headers, frankenphp_log()), and the per-thread getenv()/putenv(); module startup
 * installs what they need (pw_functions_startup). The worker loop's functions are in
 * worker.c, the stop's in stop.c, the tasks' in task.c, the stores' in store.c. C
 * because they take and make PHP values, and can bail out. See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <php_main.h>
#include <php_variables.h>
#include <php_output.h>
#include <ext/standard/head.h>
#include <ext/json/php_json.h>
#include <zend_smart_str.h>

#include <ctype.h>

#include "shim.h"

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
	int finished = pw_rs_finish_early(ctx);
	if (finished == PW_FINISH_CLIENT_GONE) {
		/* As under FrankenPHP: connection_status() says the client left. The output that
		 * follows is discarded (not failed), so the script is not ended for it. */
		PG(connection_status) |= PHP_CONNECTION_ABORTED;
	}
	RETURN_BOOL(finished != PW_FINISH_NONE);
}

/* FrankenPHP's slog levels for frankenphp_log(). */
#define PW_LOG_LEVEL_DEBUG -4
#define PW_LOG_LEVEL_INFO 0
#define PW_LOG_LEVEL_WARN 4
#define PW_LOG_LEVEL_ERROR 8

void pw_php_frankenphp_log(zend_execute_data *execute_data, zval *return_value)
{
	zend_string *message;
	zend_long level = PW_LOG_LEVEL_INFO;
	zval *context = NULL;

	ZEND_PARSE_PARAMETERS_START(1, 3)
		Z_PARAM_STR(message)
		Z_PARAM_OPTIONAL
		Z_PARAM_LONG(level)
		Z_PARAM_ARRAY(context)
	ZEND_PARSE_PARAMETERS_END();

	/* The context as JSON (a list comes out as an array; Rust keys it by index; forcing
	 * an object would turn nested lists into objects too); values JSON cannot hold become
	 * null rather than failing. JsonSerializable objects run PHP code, which may throw (then
	 * nothing is logged) or bail out (the buffer is request memory, freed with it). */
	smart_str json = {0};
	if (context && zend_hash_num_elements(Z_ARRVAL_P(context)) > 0) {
		php_json_encode(&json, context,
			PHP_JSON_UNESCAPED_SLASHES | PHP_JSON_UNESCAPED_UNICODE |
			PHP_JSON_PARTIAL_OUTPUT_ON_ERROR | PHP_JSON_INVALID_UTF8_SUBSTITUTE);
		if (EG(exception)) {
			smart_str_free(&json);
			RETURN_THROWS();
		}
		smart_str_0(&json);
	}
	int syslog_level = level >= PW_LOG_LEVEL_ERROR ? 3   /* LOG_ERR */
	                   : level >= PW_LOG_LEVEL_WARN ? 4  /* LOG_WARNING */
	                   : level >= PW_LOG_LEVEL_INFO ? 6  /* LOG_INFO */
	                   : 7;                              /* LOG_DEBUG */
	pw_php_log_line line = {
		.type = PW_LOG_FRANKENPHP,
		.message = ZSTR_VAL(message),
		.message_len = ZSTR_LEN(message),
		.context = json.s ? ZSTR_VAL(json.s) : NULL,
		.context_len = json.s ? ZSTR_LEN(json.s) : 0,
	};
	zend_string *file = zend_get_executed_filename_ex();
	if (file) {
		line.file = ZSTR_VAL(file);
		line.file_len = ZSTR_LEN(file);
		line.line = zend_get_executed_lineno();
	}
	pw_rs_log(SG(server_context), ZSTR_VAL(message), syslog_level, &line);
	smart_str_free(&json);
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
	/* The request's own HTTP_* variables, without the configured env, are its headers:
	 * the host writes one per header but those whose name has '_' or '.', whose twins
	 * they would spoof. Each name goes back to the form the host's server gives header
	 * names (Go's canonical form, as FrankenPHP returns them): HTTP_X_FORWARDED_FOR is
	 * X-Forwarded-For. A name of any length. */
	pw_shim_vars vars = {0};
	pw_rs_request_vars(ctx, &vars);
	for (size_t i = 0; i < vars.pairs; i++) {
		pw_pair p = pw_vars_pair(&vars, i);
		if (p.name_len <= 5 || strncmp(p.name, "HTTP_", 5) != 0) {
			continue;
		}
		zend_string *name = zend_string_alloc(p.name_len - 5, 0);
		bool word_start = true;
		for (size_t j = 5; j < p.name_len; j++) {
			char c = p.name[j];
			if (c == '_') {
				c = '-';
				word_start = true;
			} else {
				c = word_start ? c : (char)tolower((unsigned char)c);
				word_start = false;
			}
			ZSTR_VAL(name)[j - 5] = c;
		}
		ZSTR_VAL(name)[p.name_len - 5] = '\0';
		zval value;
		ZVAL_STRINGL(&value, p.value, p.value_len);
		zend_symtable_update(Z_ARRVAL_P(return_value), name, &value);
		zend_string_release(name);
	}
}

static void pw_add_response_header(const char *line, size_t len, void *array)
{
	size_t name_len, value_at, value_len;
	if (pw_rs_header_split(line, len, &name_len, &value_at, &value_len)) {
		add_assoc_stringl_ex(array, line, name_len, (char *)line + value_at, value_len);
	}
}

void pw_php_response_headers(zend_execute_data *execute_data, zval *return_value)
{
	ZEND_PARSE_PARAMETERS_NONE();

	array_init(return_value);
	pw_each_response_header(pw_add_response_header, return_value);
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

	/* The C environment ends a setting at its first NUL, and PHP's putenv() with it:
	 * "A\0B=v" unsets A, and no name holds a NUL. */
	len = strnlen(setting, len);
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
	/* As the C environment reads it: up to the first NUL. */
	name_len = strnlen(name, name_len);
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
		pw_pair p = pw_vars_pair(&vars, i);
		zval value;
		ZVAL_STRINGL(&value, p.value, p.value_len);
		zend_hash_str_update(Z_ARRVAL_P(array), p.name, p.name_len, &value);
	}
}

static void pw_override_function(const char *name, zif_handler handler)
{
	zend_function *func = zend_hash_str_find_ptr(CG(function_table), name, strlen(name));
	if (func && func->type == ZEND_INTERNAL_FUNCTION) {
		func->internal_function.handler = handler;
	}
}

/* At module startup (module.c): getenv(), putenv() and pcntl_signal() (stop.c)
 * replaced, frankenphp_log()'s level constants, $_ENV filled from Rust. */
void pw_functions_startup(int module_number)
{
	pw_override_function("putenv", pw_php_putenv);
	pw_override_function("getenv", pw_php_getenv);
	pw_override_function("pcntl_signal", pw_php_pcntl_signal);
	REGISTER_LONG_CONSTANT("FRANKENPHP_LOG_LEVEL_DEBUG", PW_LOG_LEVEL_DEBUG, CONST_PERSISTENT);
	REGISTER_LONG_CONSTANT("FRANKENPHP_LOG_LEVEL_INFO", PW_LOG_LEVEL_INFO, CONST_PERSISTENT);
	REGISTER_LONG_CONSTANT("FRANKENPHP_LOG_LEVEL_WARN", PW_LOG_LEVEL_WARN, CONST_PERSISTENT);
	REGISTER_LONG_CONSTANT("FRANKENPHP_LOG_LEVEL_ERROR", PW_LOG_LEVEL_ERROR, CONST_PERSISTENT);
	php_import_environment_variables = pw_import_environment;
}
