/*
 * The PHP functions of the php_worker module (other than frankenphp_handle_request(), in
 * worker.c), and the per-thread getenv()/putenv(). See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <php_main.h>
#include <php_variables.h>
#include <php_output.h>
#include <ext/standard/head.h>

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
