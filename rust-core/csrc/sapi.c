/*
 * The SAPI module of php_worker: the callbacks PHP calls for I/O (forwarded to the Rust
 * hooks), $_SERVER, and engine startup and shutdown. See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <php_main.h>
#include <php_variables.h>
#include <php_ini.h>

#include "shim.h"

static void *pw_additional_module;

/* libxml2 before 2.12 sets up its catalogs and its schema types on first use, without a
 * lock. Two threads setting up the catalogs at once each create the catalog mutex: one then
 * unlocks the other's and every later catalog lookup (SoapClient, DOM with a DTD, XSL) waits
 * forever; the schema type tables are built twice. Done once here, on the thread that
 * starts the engine, before any PHP thread runs. Weak: a PHP built without libxml. */
extern void xmlInitializeCatalog(void) __attribute__((weak));
extern void xmlSchemaInitTypes(void) __attribute__((weak));
extern int xmlRelaxNGInitTypes(void) __attribute__((weak));

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

static void pw_forward_header(const char *line, size_t len, void *ctx)
{
	pw_rs_header(ctx, line, len);
}

void pw_forward_headers(void *ctx)
{
	pw_each_response_header(pw_forward_header, ctx);
}

static int pw_sapi_send_headers(sapi_headers_struct *headers)
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
static char *pw_sapi_getenv(const char *name, size_t len)
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

static void pw_sapi_log_message(const char *message, int syslog_level)
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

sapi_module_struct pw_sapi_module = {
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

/* ---- engine startup and shutdown ------------------------------------------------- */

/* The host's defaults ("key=value\n" lines), until the engine stops. */
static const char *pw_host_ini_defaults;

/* Defaults under php.ini: a server must not show error details (paths, queries) to its
 * clients, and must log them (PHP's own defaults do the opposite of both), unless
 * php.ini or php_ini says otherwise; then the host's own (a portable binary's
 * extension_dir). */
static void pw_ini_defaults(HashTable *configuration_hash)
{
	pw_ini_default(configuration_hash, "display_errors", "0", 1);
	pw_ini_default(configuration_hash, "log_errors", "1", 1);
	pw_ini_default_lines(configuration_hash, pw_host_ini_defaults);
}

int pw_shim_engine_startup(const char *ini_entries, const char *ini_defaults, void *additional_module,
                           const pw_shim_vars *env)
{
	pw_host_ini_defaults = ini_defaults;
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
	if (xmlInitializeCatalog) {
		xmlInitializeCatalog();
	}
	if (xmlSchemaInitTypes && xmlRelaxNGInitTypes) {
		xmlSchemaInitTypes();
		xmlRelaxNGInitTypes();
	}
	if (zend_error_cb != pw_error_cb) { /* zend_startup() sets PHP's own at every start */
		pw_php_error_cb = zend_error_cb;
		zend_error_cb = pw_error_cb;
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
	pw_host_ini_defaults = NULL;
}

int64_t pw_shim_post_max_size(void)
{
	/* The main thread's copy of the SAPI globals, set from php.ini and php_ini at startup;
	 * post_max_size is PHP_INI_PERDIR, so no script changes it later. */
	return (int64_t)SG(post_max_size);
}

void pw_ini_default(HashTable *configuration_hash, const char *name, const char *value, size_t value_len)
{
	zval zv;
	ZVAL_NEW_STR(&zv, zend_string_init(value, value_len, 1));
	zend_hash_str_update(configuration_hash, name, strlen(name), &zv);
}

void pw_ini_default_lines(HashTable *configuration_hash, const char *lines)
{
	while (lines && *lines) {
		const char *end = strchr(lines, '\n');
		const char *eq = memchr(lines, '=', end ? (size_t)(end - lines) : strlen(lines));
		if (!end) {
			end = lines + strlen(lines);
		}
		if (eq) { /* Rust wrote these lines: a key without '=' or newline, a value without newline */
			zval zv;
			ZVAL_NEW_STR(&zv, zend_string_init(eq + 1, (size_t)(end - eq - 1), 1));
			zend_hash_str_update(configuration_hash, lines, (size_t)(eq - lines), &zv);
		}
		lines = *end ? end + 1 : end;
	}
}
