/*
 * The engine's start and stop, on its main thread: TSRM, the SAPI module PHP starts
 * with (its callbacks are sapi.c's), the modules' startup (the php_worker module's is
 * module.c's), the defaults under php.ini, and what must be set up once before any PHP
 * thread runs. C because PHP's startup and shutdown are C's macros and globals, and can
 * bail out. See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <php_main.h>
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

/* PHP registers its built-in extensions through this pointer (main/main.c; no header
 * declares it): wrapped during startup, the module named frankenphp (module.c) is
 * registered with them, before the modules start. php_module_startup takes one
 * additional module only, php_worker's. */
extern PHPAPI int (*php_register_internal_extensions_func)(void);
static int (*pw_builtin_extensions)(void);

static int pw_register_extensions(void)
{
	if (pw_builtin_extensions() == FAILURE) {
		return FAILURE;
	}
	return pw_register_frankenphp_module();
}

static int pw_sapi_startup(sapi_module_struct *module)
{
	pw_builtin_extensions = php_register_internal_extensions_func;
	php_register_internal_extensions_func = pw_register_extensions;
	zend_result started = php_module_startup(module, (zend_module_entry *)pw_additional_module);
	php_register_internal_extensions_func = pw_builtin_extensions;
	return started;
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
	pw_sapi_engine_started(env);
	pw_worker_reset_engine_started();
	return 0;
}

void pw_shim_engine_shutdown(void)
{
	pw_sapi_module.shutdown(&pw_sapi_module);
	sapi_shutdown();
	tsrm_shutdown();
	pw_sapi_engine_stopped();
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
