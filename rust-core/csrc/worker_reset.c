/*
 * What a worker request leaves behind, put back between two requests: the state PHP's
 * own request shutdown resets (in php_request_shutdown() and in the request shutdown and
 * post-deactivate hooks of each extension) that belongs to the request rather than to
 * the script's own variables and objects. worker_request.c runs the trimmed cycle and
 * calls this file at its steps. docs/security.md has the table, entry by entry.
 *
 * Three kinds of state:
 *   - the request's data (libxml's error list, the last HTTP response headers,
 *     error_get_last(), strtok()'s string, the stat cache, json/preg/intl errors, the
 *     session): dropped after every request;
 *   - settings (ini_set() values, the locale, the default timezone, the umask, the
 *     working directory, mbstring's encodings, putenv(), libxml's internal errors, the
 *     random generators' seeding): back to the baseline, the value the worker script
 *     left before its first frankenphp_handle_request(); what the script set at boot is
 *     its own, what a request set is the request's;
 *   - the script's (objects, statics, autoloaders, error and shutdown handlers, stream
 *     wrappers and filters it registered): kept, as a variable is.
 *
 * pw_reset_modules is the table of every extension whose hooks PHP runs at a request's
 * end or start. An extension loaded that is not in it gets a warning at engine start
 * (pw_worker_reset_engine_started): its request state would cross worker requests
 * unseen.
 *
 * Checks are cheap (pointer and flag comparisons); work is done only for state that
 * changed. C because the state lives in PHP's globals, reached through its macros, and
 * restoring some of it runs PHP code that can bail out (the callers catch it). See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <php_main.h>
#include <php_ini.h>
#include <ext/standard/basic_functions.h>
#include <ext/standard/file.h>
#include <ext/standard/php_filestat.h>
#include <ext/standard/url_scanner_ex.h>
#include <ext/date/php_date.h>
#include <ext/pcre/php_pcre.h>
#include <ext/session/php_session.h>
/* Extensions a PHP of one's own may lack (PHP_CONFIG, scripts/build-php.sh): their part
 * is left out with them. */
#ifdef HAVE_MBSTRING
#include <ext/mbstring/mbstring.h>
#include <ext/mbstring/php_mbregex.h>
#endif
#if __has_include(<ext/mysqli/php_mysqli_structs.h>)
#include <ext/mysqli/php_mysqli_structs.h>
#define PW_HAVE_MYSQLI 1
#endif

#include <locale.h>
#include <stdio.h>
#include <sys/stat.h>

#include "shim.h"

/* libxml2's, declared here rather than through its headers, which PHP's include path
 * does not carry: the error libxml_get_last_error() reads, kept per thread by libxml2. */
void xmlResetLastError(void);

/* ---------------------------------------------------------------------------------
 * The extensions whose request hooks PHP runs, and what a worker does about each.
 * --------------------------------------------------------------------------------- */

typedef enum {
	/* Its request shutdown (and post-deactivate) hooks run after each worker request and
	 * its request startup hook before the next: they only drop request state. */
	PW_HOOKS,
	/* Its state is reset by hand below (its hooks would also drop the script's). */
	PW_BY_HAND,
	/* Its hooks hold nothing of a request, or what they reset is the script's. */
	PW_KEPT,
} pw_reset_kind;

typedef struct {
	const char *name; /* as PHP registers the module */
	pw_reset_kind kind;
} pw_reset_module;

/* Every module of php_worker's builds (PHP 8.4 and 8.2, scripts/build-php.sh) with a
 * request startup, request shutdown or post-deactivate hook, and the developer
 * extensions; docs/security.md says why for each. */
static const pw_reset_module pw_reset_modules[] = {
	/* request state only */
	{"filter", PW_HOOKS},   /* the parsed input arrays of filter_input() */
	{"session", PW_HOOKS},  /* the session: closed, written, its ID forgotten (its save handler kept) */
	{"intl", PW_HOOKS},     /* intl_get_error_code(), the collator sort() uses, the grapheme iterator */
	{"zlib", PW_HOOKS},     /* zlib.output_compression's handler, the encoding it negotiated */
	{"zstd", PW_HOOKS},     /* the same for zstd.output_compression */
	{"tidy", PW_HOOKS},     /* tidy.clean_output's handler */
	{"gmp", PW_HOOKS},      /* gmp_random_seed()'s state */
	{"random", PW_HOOKS},   /* mt_srand()/srand() and lcg_value()'s seeds: the next use seeds anew */
	{"json", PW_HOOKS},     /* json_last_error() */
	{"sockets", PW_HOOKS},  /* socket_strerror()'s buffer */
	{"soap", PW_HOOKS},     /* use_soap_error_handler() and the state of a SOAP call */
	{"ldap", PW_HOOKS},     /* the TLS context of the next connection */
	{"amqp", PW_HOOKS},     /* its per-request bookkeeping */
	{"ast", PW_HOOKS},      /* its per-request cache */
	{"apcu", PW_HOOKS},     /* the request time of apc.use_request_time */
	{"libxml", PW_HOOKS},   /* by its post-deactivate hook: errors, error handlers; see pw_hooks_run() */
	/* settings back to the baseline, request data dropped: by hand below */
	{"Core", PW_BY_HAND},
	{"standard", PW_BY_HAND},
	{"date", PW_BY_HAND},   /* never its post-deactivate hook: it frees the time zones DateTime objects use */
	{"pcre", PW_BY_HAND},
	{"mbstring", PW_BY_HAND},
	{"mysqli", PW_BY_HAND},
	{"openssl", PW_BY_HAND},
	/* kept */
	{"spl", PW_KEPT},            /* autoloaders and spl_object_hash()'s mask: the script's */
	{"phar", PW_KEPT},           /* archives the script's autoloader reads */
	{"Zend OPcache", PW_KEPT},   /* the cache; its restarts are php_worker's (runtime/opcache.rs) */
	{"pcntl", PW_KEPT},          /* signal handlers, which php_worker replaces (stop.c) */
	{"readline", PW_KEPT},       /* the command line's */
	{"pgsql", PW_KEPT},          /* links the script opened, and its default link */
	{"mysqlnd", PW_KEPT},        /* debug builds' tracing only */
	{"pdo_mysql", PW_KEPT},      /* likewise */
	{"gd", PW_KEPT},             /* the font cache, the process's */
	{"imagick", PW_KEPT},        /* progress callbacks the script set */
	{"xdebug", PW_KEPT},         /* developer extensions: they attach to the worker's run */
	{"pcov", PW_KEPT},
	{"excimer", PW_KEPT},
	{"php_worker", PW_KEPT},     /* php_worker's own module: its hooks end the script's run */
	{NULL, PW_KEPT},
};

static const pw_reset_module *pw_reset_module_find(const char *name)
{
	for (const pw_reset_module *m = pw_reset_modules; m->name; m++) {
		if (strcasecmp(m->name, name) == 0) {
			return m;
		}
	}
	return NULL;
}

/* Learnt when the engine starts (pw_worker_reset_engine_started), on its main thread
 * before any PHP thread runs, and read by every PHP thread after: the PW_HOOKS modules
 * loaded, in registration order, and the globals ids of the extensions reset by hand
 * whose headers do not export them. */
#define PW_HOOK_MODULES_MAX 64
static zend_module_entry *pw_hook_modules[PW_HOOK_MODULES_MAX];
static size_t pw_hook_module_count;
enum { PW_GLOBALS_DATE, PW_GLOBALS_MBSTRING, PW_GLOBALS_OPENSSL, PW_GLOBALS_MYSQLI, PW_GLOBALS_COUNT };
static const char *const pw_globals_modules[PW_GLOBALS_COUNT] = {"date", "mbstring", "openssl", "mysqli"};
static ts_rsrc_id pw_globals_ids[PW_GLOBALS_COUNT];
static zend_module_entry *pw_mbstring_module; /* reset by hand with its own hooks */

void pw_worker_reset_engine_started(void)
{
	pw_hook_module_count = 0;
	zend_module_entry *module;
	ZEND_HASH_MAP_FOREACH_PTR(&module_registry, module) {
		if (!module->request_startup_func && !module->request_shutdown_func && !module->post_deactivate_func) {
			continue;
		}
		const pw_reset_module *known = pw_reset_module_find(module->name);
		if (known) {
			if (known->kind == PW_HOOKS && pw_hook_module_count < PW_HOOK_MODULES_MAX) {
				pw_hook_modules[pw_hook_module_count++] = module;
			}
			continue;
		}
		char message[512];
		snprintf(message, sizeof(message),
		         "worker mode does not know the request state of extension %s (it has request hooks "
		         "php_worker does not run between worker requests): what one worker request leaves in it "
		         "can reach the next",
		         module->name);
		pw_rs_log(NULL, message, LOG_WARNING, NULL);
	} ZEND_HASH_FOREACH_END();
	for (int i = 0; i < PW_GLOBALS_COUNT; i++) {
		module = zend_hash_str_find_ptr(&module_registry, pw_globals_modules[i], strlen(pw_globals_modules[i]));
		pw_globals_ids[i] = module && module->globals_id_ptr ? *module->globals_id_ptr : 0;
	}
	pw_mbstring_module = zend_hash_str_find_ptr(&module_registry, ZEND_STRL("mbstring"));
}

/* This thread's globals of one of pw_globals_modules; NULL when it is not loaded. */
static void *pw_module_globals(int which)
{
	return pw_globals_ids[which] ? TSRMG_BULK(pw_globals_ids[which], void *) : NULL;
}

/* The user session save handler (session_set_save_handler()) outlives a worker's
 * request: the session's request shutdown frees it, as at the end of a php-fpm request,
 * but the worker code that set it (before the loop, or in an earlier request) does not
 * run again, and the next session_start() would fail ("Failed to initialize storage
 * module: user"). Its references are taken before and put back after; the request's
 * memory holds them either way, so a bailout in between loses nothing. */
typedef struct {
	__typeof__(PS(mod_user_names)) names; /* a struct of zvals on 8.4, an array before */
	zend_string *class_name;
} pw_session_handler;

static void pw_session_handler_keep(pw_session_handler *kept)
{
	memcpy(&kept->names, &PS(mod_user_names), sizeof(kept->names));
	zval *z = (zval *)&kept->names;
	for (size_t i = 0; i < sizeof(kept->names) / sizeof(zval); i++) {
		Z_TRY_ADDREF(z[i]);
	}
	kept->class_name = PS(mod_user_class_name) ? zend_string_copy(PS(mod_user_class_name)) : NULL;
}

static void pw_session_handler_restore(pw_session_handler *kept)
{
	zval *now = (zval *)&PS(mod_user_names);
	for (size_t i = 0; i < sizeof(kept->names) / sizeof(zval); i++) {
		zval_ptr_dtor(&now[i]); /* UNDEF after the shutdown, unless it set one anew */
	}
	memcpy(&PS(mod_user_names), &kept->names, sizeof(kept->names));
	if (PS(mod_user_class_name)) {
		zend_string_release(PS(mod_user_class_name));
	}
	PS(mod_user_class_name) = kept->class_name;
}

/* libxml's streams context (libxml_set_streams_context()); declared here, as
 * xmlResetLastError() is. */
void php_libxml_switch_context(zval *context, zval *oldcontext);

static void pw_hook_shutdown(zend_module_entry *module)
{
	if (strcmp(module->name, "session") == 0) {
		pw_session_handler kept;
		pw_session_handler_keep(&kept);
		module->request_shutdown_func(module->type, module->module_number);
		pw_session_release_leaked();
		pw_session_handler_restore(&kept);
		return;
	}
	if (strcmp(module->name, "libxml") == 0) {
		/* Its request shutdown would free the external entity loader the script set at
		 * boot (pw_reset_libxml() puts the baseline's back); its post-deactivate drops
		 * the errors and handlers, and forgets the streams context without releasing
		 * it, which is done here. */
		zval context;
		ZVAL_UNDEF(&context);
#ifdef HAVE_LIBXML
		php_libxml_switch_context(NULL, &context);
#endif
		if (module->request_shutdown_func) {
			module->request_shutdown_func(module->type, module->module_number);
		}
		if (module->post_deactivate_func) {
			module->post_deactivate_func();
		}
		zval_ptr_dtor(&context);
		return;
	}
	if (module->request_shutdown_func) {
		module->request_shutdown_func(module->type, module->module_number);
	}
	if (module->post_deactivate_func) {
		module->post_deactivate_func();
	}
}

/* The request hooks of the PW_HOOKS modules, in PHP's order: startup in the modules'
 * registration order, shutdown in reverse (output handlers stack as PHP stacks them). */
static void pw_hooks_run(bool startup)
{
	if (startup) {
		for (size_t i = 0; i < pw_hook_module_count; i++) {
			zend_module_entry *module = pw_hook_modules[i];
			if (module->request_startup_func) {
				module->request_startup_func(module->type, module->module_number);
			}
		}
		return;
	}
	for (size_t i = pw_hook_module_count; i-- > 0;) {
		pw_hook_shutdown(pw_hook_modules[i]);
	}
}

/* ---------------------------------------------------------------------------------
 * The baseline: what the worker script left before its first frankenphp_handle_request().
 * Kept in memory of its own (malloc), which neither the requests' nor the script's end
 * frees; pw_worker_baseline_end() frees it.
 * --------------------------------------------------------------------------------- */

typedef struct {
	zend_string *name;        /* persistent copies */
	zend_string *value;       /* NULL: the entry has no value */
	const zend_string *seen;  /* the entry's value string at capture: unchanged while equal */
} pw_ini_kept;

typedef struct {
	bool active;
	pw_ini_kept *ini;
	uint32_t ini_count;
	char *locale;             /* setlocale(LC_ALL, NULL), when the script changed the locale */
	char *ctype;              /* BG(ctype_string), likewise (NULL: "C") */
	bool locale_changed;
	int umask_original;       /* BG(umask) at capture: the umask before the script changed it, or -1 */
	mode_t umask;             /* the umask the script left */
	char *cwd;                /* the working directory */
	char *timezone;           /* date_default_timezone_set()'s, or NULL */
	const void *mb_internal, *mb_http_output;
	int mb_illegal_mode;
	uint32_t mb_illegal_char;
	const void **mb_detect;   /* a copy of the detect order list */
	size_t mb_detect_count;
	char *mb_regex;           /* mb_regex_encoding() */
	bool libxml_internal;     /* libxml_use_internal_errors() */
	zval libxml_context;      /* libxml_set_streams_context()'s, a reference of ours */
	zval libxml_loader;       /* libxml_set_external_entity_loader()'s callable, or null */
	zend_long mysqli_report;  /* mysqli_report() */
	/* stream_context_set_default()'s context, and a copy of its options: request memory,
	 * the worker's, which lasts until its final request shutdown */
	php_stream_context *default_context;
	HashTable *default_options;
} pw_baseline;

static __thread pw_baseline pw_base;

static char *pw_strdup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static zend_string *pw_persistent_copy(const zend_string *s)
{
	return s ? zend_string_init(ZSTR_VAL(s), ZSTR_LEN(s), 1) : NULL;
}

/* The process's umask, read without changing it (umask() would, for every thread). */
static bool pw_read_umask(mode_t *mask)
{
	FILE *f = fopen("/proc/self/status", "re");
	if (!f) {
		return false;
	}
	char line[128];
	bool found = false;
	while (fgets(line, sizeof(line), f)) {
		unsigned int m;
		if (sscanf(line, "Umask: %o", &m) == 1) {
			*mask = (mode_t)m;
			found = true;
			break;
		}
	}
	fclose(f);
	return found;
}

/* Calls a PHP function by name with one argument (NULL: none); the result is
 * discarded. For the setters whose state has no API in C. */
static void pw_call(const char *function, zval *arg)
{
	zval name, retval;
	ZVAL_STRING(&name, function);
	ZVAL_UNDEF(&retval);
	call_user_function(NULL, NULL, &name, &retval, arg ? 1 : 0, arg);
	zval_ptr_dtor(&retval);
	zval_ptr_dtor(&name);
}

static bool pw_libxml_internal_errors(void)
{
	zend_function *f = zend_hash_str_find_ptr(CG(function_table), ZEND_STRL("libxml_use_internal_errors"));
	if (!f) {
		return false;
	}
	zval name, retval, arg;
	ZVAL_STRING(&name, "libxml_use_internal_errors");
	ZVAL_NULL(&arg); /* null: tells without changing */
	ZVAL_UNDEF(&retval);
	call_user_function(NULL, NULL, &name, &retval, 1, &arg);
	bool on = Z_TYPE(retval) == IS_TRUE;
	zval_ptr_dtor(&name);
	return on;
}

void pw_worker_baseline_capture(void)
{
	pw_worker_baseline_end(false); /* a stale one: its script and memory are gone */
	pw_baseline *b = &pw_base;
	b->active = true;

	if (EG(modified_ini_directives) && zend_hash_num_elements(EG(modified_ini_directives)) > 0) {
		b->ini = calloc(zend_hash_num_elements(EG(modified_ini_directives)), sizeof(pw_ini_kept));
		zend_ini_entry *entry;
		ZEND_HASH_MAP_FOREACH_PTR(EG(modified_ini_directives), entry) {
			if (!b->ini) {
				break;
			}
			pw_ini_kept *kept = &b->ini[b->ini_count++];
			kept->name = pw_persistent_copy(entry->name);
			kept->value = pw_persistent_copy(entry->value);
			kept->seen = entry->value;
		} ZEND_HASH_FOREACH_END();
	}

	b->locale_changed = BG(locale_changed);
	if (b->locale_changed) {
		b->locale = pw_strdup_or_null(setlocale(LC_ALL, NULL));
		b->ctype = BG(ctype_string) ? strdup(ZSTR_VAL(BG(ctype_string))) : NULL;
		BG(locale_changed) = 0; /* so that a request's setlocale() shows */
	}
	b->umask_original = BG(umask);
	if (BG(umask) != -1 && !pw_read_umask(&b->umask)) {
		b->umask_original = -1; /* unknown: left as the request leaves it */
	}
	BG(umask) = -1; /* so that a request's umask() shows */
	b->cwd = pw_strdup_or_null(CWDG(cwd).cwd);

	zend_date_globals *date = pw_module_globals(PW_GLOBALS_DATE);
	b->timezone = date ? pw_strdup_or_null(date->timezone) : NULL;

#ifdef HAVE_MBSTRING
	zend_mbstring_globals *mb = pw_module_globals(PW_GLOBALS_MBSTRING);
	if (mb) {
		b->mb_internal = mb->current_internal_encoding;
		b->mb_http_output = mb->current_http_output_encoding;
		b->mb_illegal_mode = mb->current_filter_illegal_mode;
		b->mb_illegal_char = mb->current_filter_illegal_substchar;
		b->mb_detect_count = mb->current_detect_order_list_size;
		b->mb_detect = calloc(b->mb_detect_count ? b->mb_detect_count : 1, sizeof(void *));
		if (b->mb_detect) {
			memcpy(b->mb_detect, mb->current_detect_order_list, b->mb_detect_count * sizeof(void *));
		}
#ifdef HAVE_MBREGEX
		b->mb_regex = pw_strdup_or_null(php_mb_regex_get_mbctype());
#endif
	}
#endif
	b->libxml_internal = pw_libxml_internal_errors();
#ifdef HAVE_LIBXML
	php_libxml_switch_context(NULL, &b->libxml_context);
#endif
	Z_TRY_ADDREF(b->libxml_context);
	ZVAL_NULL(&b->libxml_loader);
	if (zend_hash_str_exists(CG(function_table), ZEND_STRL("libxml_get_external_entity_loader"))) {
		zval name;
		ZVAL_STRING(&name, "libxml_get_external_entity_loader");
		call_user_function(NULL, NULL, &name, &b->libxml_loader, 0, NULL);
		zval_ptr_dtor(&name);
	}
#ifdef PW_HAVE_MYSQLI
	zend_mysqli_globals *mysqli = pw_module_globals(PW_GLOBALS_MYSQLI);
	b->mysqli_report = mysqli ? mysqli->report_mode : 0;
#endif
	b->default_context = FG(default_context);
	if (b->default_context && Z_TYPE(b->default_context->options) == IS_ARRAY) {
		b->default_options = zend_array_dup(Z_ARR(b->default_context->options));
		GC_ADDREF(b->default_context->res); /* kept, whatever the script does with its own */
	}
	pw_rs_env_keep_baseline();
}

void pw_worker_baseline_end(bool request_memory_alive)
{
	pw_baseline *b = &pw_base;
	if (!b->active) {
		return;
	}
	if (request_memory_alive) {
		if (b->default_options) {
			zend_array_release(b->default_options);
			zend_list_delete(b->default_context->res);
		}
		zval_ptr_dtor(&b->libxml_context);
		zval_ptr_dtor(&b->libxml_loader);
	}
	for (uint32_t i = 0; i < b->ini_count; i++) {
		zend_string_release(b->ini[i].name);
		if (b->ini[i].value) {
			zend_string_release(b->ini[i].value);
		}
	}
	free(b->ini);
	/* The script's own changes go back at its end, as a request's do at a classic
	 * request's end: PHP's request shutdown reads these flags. */
	if (b->locale_changed) {
		BG(locale_changed) = 1;
	}
	if (b->umask_original != -1 && BG(umask) == -1) {
		BG(umask) = b->umask_original;
	}
	free(b->locale);
	free(b->ctype);
	free(b->cwd);
	free(b->timezone);
	free(b->mb_detect);
	free(b->mb_regex);
	memset(b, 0, sizeof(*b));
}

/* ---------------------------------------------------------------------------------
 * After each request.
 * --------------------------------------------------------------------------------- */

static const pw_ini_kept *pw_ini_baseline(const zend_string *name)
{
	for (uint32_t i = 0; i < pw_base.ini_count; i++) {
		if (zend_string_equals(pw_base.ini[i].name, name)) {
			return &pw_base.ini[i];
		}
	}
	return NULL;
}

/* session_set_save_handler() stores "user" in session.save_handler: the setting half of
 * a registration, whose callbacks the script keeps (pw_session_handler_keep()) whenever
 * it made it, before its loop or in a request, as FrankenPHP keeps it. */
static bool pw_ini_is_registration(const zend_ini_entry *entry)
{
	return zend_string_equals_literal(entry->name, "session.save_handler") && entry->value &&
	       zend_string_equals_literal(entry->value, "user");
}

/* A registration made by a request joins the baseline. */
static void pw_ini_adopt(const zend_ini_entry *entry)
{
	pw_ini_kept *grown = realloc(pw_base.ini, (pw_base.ini_count + 1) * sizeof(pw_ini_kept));
	if (!grown) {
		return;
	}
	pw_base.ini = grown;
	pw_base.ini[pw_base.ini_count++] = (pw_ini_kept){
		.name = pw_persistent_copy(entry->name),
		.value = pw_persistent_copy(entry->value),
		.seen = entry->value,
	};
}

/* ini_set(), set_time_limit(), error_reporting(), ignore_user_abort() and every other
 * runtime change of a php.ini setting: back to the baseline's value, or to php.ini's
 * for one the script had not changed, as PHP's request shutdown restores them. */
static void pw_reset_ini(void)
{
	HashTable *modified = EG(modified_ini_directives);
	if (!modified) {
		return;
	}
	uint32_t count = zend_hash_num_elements(modified);
	if (count == pw_base.ini_count) {
		bool same = true;
		zend_ini_entry *entry;
		ZEND_HASH_MAP_FOREACH_PTR(modified, entry) {
			const pw_ini_kept *kept = pw_ini_baseline(entry->name);
			if (!kept || kept->seen != entry->value) {
				same = false;
				break;
			}
		} ZEND_HASH_FOREACH_END();
		if (same) {
			return; /* the common case: no request changed a setting */
		}
	}
	/* As PHP's own restore, which runs once no PHP code can: the script's error handler
	 * is parked and error_reporting is 0, since some settings' handlers raise a
	 * deprecation at every stage. */
	zval handler;
	ZVAL_COPY_VALUE(&handler, &EG(user_error_handler));
	ZVAL_UNDEF(&EG(user_error_handler));
	EG(error_reporting) = 0;
	zend_string **restore = safe_emalloc(count, sizeof(zend_string *), 0);
	uint32_t n = 0;
	zend_ini_entry *entry;
	ZEND_HASH_MAP_FOREACH_PTR(modified, entry) {
		if (pw_ini_baseline(entry->name)) {
			continue;
		}
		if (pw_ini_is_registration(entry)) {
			pw_ini_adopt(entry);
			continue;
		}
		restore[n++] = zend_string_copy(entry->name);
	} ZEND_HASH_FOREACH_END();
	for (uint32_t i = 0; i < n; i++) {
		zend_restore_ini_entry(restore[i], ZEND_INI_STAGE_DEACTIVATE);
		zend_string_release(restore[i]);
	}
	efree(restore);
	for (uint32_t i = 0; i < pw_base.ini_count; i++) {
		pw_ini_kept *kept = &pw_base.ini[i];
		zend_ini_entry *now = zend_hash_find_ptr(EG(ini_directives), kept->name);
		if (!now || now->value == kept->seen) {
			continue;
		}
		if (kept->value && !(now->value && zend_string_equals(now->value, kept->value))) {
			zend_string *value = zend_string_init(ZSTR_VAL(kept->value), ZSTR_LEN(kept->value), 0);
			/* The deactivate stage, as PHP's: some settings refuse the runtime stage once
			 * output was sent (zlib.output_compression) or can only tighten there
			 * (open_basedir). */
			zend_alter_ini_entry_ex(kept->name, value, ZEND_INI_SYSTEM, ZEND_INI_STAGE_DEACTIVATE, 1);
			zend_string_release(value);
		}
		kept->seen = now->value;
	}
	/* error_reporting as its setting now says (OnUpdateErrorReporting's rule). */
	zend_ini_entry *reporting = zend_hash_str_find_ptr(EG(ini_directives), ZEND_STRL("error_reporting"));
	EG(error_reporting) = reporting && reporting->value ? atoi(ZSTR_VAL(reporting->value)) : E_ALL;
	ZVAL_COPY_VALUE(&EG(user_error_handler), &handler);
}

static void pw_reset_locale(void)
{
	if (!BG(locale_changed)) {
		return;
	}
	/* The locale is the process's: a request's setlocale() reaches every thread while it
	 * runs (as under any threaded PHP); it goes back when the request ends. */
	if (pw_base.locale) {
		setlocale(LC_ALL, pw_base.locale);
	} else {
		setlocale(LC_ALL, "C");
		zend_reset_lc_ctype_locale();
	}
	zend_update_current_locale();
	if (BG(ctype_string)) {
		zend_string_release_ex(BG(ctype_string), 0);
		BG(ctype_string) = NULL;
	}
	if (pw_base.ctype) {
		BG(ctype_string) = zend_string_init(pw_base.ctype, strlen(pw_base.ctype), 0);
	}
	BG(locale_changed) = 0;
}

static void pw_reset_standard(void)
{
	/* strtok()'s string */
	if (BG(strtok_string)) {
		zend_string_release(BG(strtok_string));
		BG(strtok_string) = NULL;
	}
	BG(strtok_last) = NULL;
	pw_reset_locale();
	if (BG(umask) != -1) {
		umask(pw_base.umask_original != -1 ? pw_base.umask : (mode_t)BG(umask));
		BG(umask) = -1;
	}
	/* The last stat()'s result (the realpath cache is PHP's across requests too). */
	php_clear_stat_cache(false, NULL, 0);
	/* output_add_rewrite_var()'s variables, and the rewriter's state */
	PHP_RSHUTDOWN(url_scanner_ex)(MODULE_PERSISTENT, 0);
	PHP_RINIT(url_scanner_ex)(MODULE_PERSISTENT, 0);
	/* stream_context_set_default(): a request's options (its credentials, say) must not
	 * go out with the next request's streams. */
	if (FG(default_context) != pw_base.default_context) {
		if (FG(default_context)) {
			zend_list_delete(FG(default_context)->res);
		}
		FG(default_context) = pw_base.default_context;
	}
	if (pw_base.default_context && pw_base.default_options) {
		zval_ptr_dtor(&pw_base.default_context->options);
		ZVAL_ARR(&pw_base.default_context->options, zend_array_dup(pw_base.default_options));
	}
#if PHP_VERSION_ID >= 80400
	/* http_get_last_response_headers() */
	zval_ptr_dtor(&BG(last_http_headers));
	ZVAL_UNDEF(&BG(last_http_headers));
#endif
}

static void pw_reset_core(void)
{
	/* error_get_last() */
	if (PG(last_error_message)) {
		zend_string_release(PG(last_error_message));
		PG(last_error_message) = NULL;
	}
	if (PG(last_error_file)) {
		zend_string_release(PG(last_error_file));
		PG(last_error_file) = NULL;
	}
	PG(last_error_type) = 0;
	PG(last_error_lineno) = 0;
	/* sys_get_temp_dir(), cached from sys_temp_dir or TMPDIR, which a request may set */
	if (PG(php_sys_temp_dir)) {
		efree(PG(php_sys_temp_dir));
		PG(php_sys_temp_dir) = NULL;
	}
	/* chdir(): through PHP's function, which OPcache follows to key relative paths */
	if (pw_base.cwd && CWDG(cwd).cwd && strcmp(CWDG(cwd).cwd, pw_base.cwd) != 0) {
		zval dir;
		ZVAL_STRING(&dir, pw_base.cwd);
		pw_call("chdir", &dir);
		zval_ptr_dtor(&dir);
	}
	/* memory_get_peak_usage() tells about the request */
	zend_memory_reset_peak_usage();
	pw_reset_ini();
}

static void pw_reset_date(void)
{
	zend_date_globals *date = pw_module_globals(PW_GLOBALS_DATE);
	if (!date) {
		return;
	}
	if (date->timezone && (!pw_base.timezone || strcmp(date->timezone, pw_base.timezone) != 0)) {
		efree(date->timezone);
		date->timezone = NULL;
	}
	if (!date->timezone && pw_base.timezone) {
		date->timezone = estrdup(pw_base.timezone);
	}
	/* date_get_last_errors() */
	if (date->last_errors) {
		timelib_error_container_dtor(date->last_errors);
		date->last_errors = NULL;
	}
}

/* mbstring's request hooks drop what a request left (mb_http_input()'s detected
 * encodings, mb_ereg_search_init()'s subject, the compiled patterns); then its settings
 * go back to the baseline's, which its request startup had set to php.ini's. */
static void pw_reset_mbstring(void)
{
#ifdef HAVE_MBSTRING
	zend_mbstring_globals *mb = pw_module_globals(PW_GLOBALS_MBSTRING);
	zend_module_entry *module = pw_mbstring_module;
	if (!mb || !module) {
		return;
	}
	module->request_shutdown_func(module->type, module->module_number);
	module->request_startup_func(module->type, module->module_number);
	mb->current_internal_encoding = pw_base.mb_internal;
	mb->current_http_output_encoding = pw_base.mb_http_output;
	mb->current_filter_illegal_mode = pw_base.mb_illegal_mode;
	mb->current_filter_illegal_substchar = pw_base.mb_illegal_char;
	if (pw_base.mb_detect && (mb->current_detect_order_list_size != pw_base.mb_detect_count ||
	    memcmp(mb->current_detect_order_list, pw_base.mb_detect, pw_base.mb_detect_count * sizeof(void *)) != 0)) {
		if (mb->current_detect_order_list) {
			efree(ZEND_VOIDP(mb->current_detect_order_list));
		}
		mb->current_detect_order_list = safe_emalloc(pw_base.mb_detect_count ? pw_base.mb_detect_count : 1, sizeof(void *), 0);
		memcpy(ZEND_VOIDP(mb->current_detect_order_list), pw_base.mb_detect, pw_base.mb_detect_count * sizeof(void *));
		mb->current_detect_order_list_size = pw_base.mb_detect_count;
	}
#ifdef HAVE_MBREGEX
	if (pw_base.mb_regex && strcmp(php_mb_regex_get_mbctype(), pw_base.mb_regex) != 0) {
		php_mb_regex_set_mbctype(pw_base.mb_regex);
	}
#endif
#endif
}

/* libxml's hooks (pw_hook_shutdown) left internal errors off, no streams context and no
 * entity loader: the baseline's come back. */
static void pw_reset_libxml(void)
{
	if (pw_base.libxml_internal) {
		zval on;
		ZVAL_TRUE(&on);
		pw_call("libxml_use_internal_errors", &on);
	}
#ifdef HAVE_LIBXML
	if (Z_TYPE(pw_base.libxml_context) == IS_RESOURCE) {
		Z_ADDREF(pw_base.libxml_context);
		php_libxml_switch_context(&pw_base.libxml_context, NULL);
	}
#endif
	if (Z_TYPE(pw_base.libxml_loader) != IS_NULL && Z_TYPE(pw_base.libxml_loader) != IS_UNDEF) {
		pw_call("libxml_set_external_entity_loader", &pw_base.libxml_loader);
	}
#ifdef HAVE_LIBXML
	xmlResetLastError();
#endif
}

/* These extensions keep their globals' type out of their installed headers; the one
 * field read here is the first of each, in PHP 8.2 and 8.4 alike. */
typedef struct {
	int buffer[16]; /* PHP_OPENSSL_ERR_BUFFER_SIZE */
	int top;
	int bottom;
} pw_openssl_errors;
typedef struct {
	pw_openssl_errors *errors;
} pw_openssl_globals;
typedef struct {
	zend_resource *default_dir;
} pw_dir_globals;
extern int dir_globals_id;
void ERR_clear_error(void);

static void pw_reset_errors_of_extensions(void)
{
	/* preg_last_error() */
	PCRE_G(error_code) = PHP_PCRE_NO_ERROR;
	/* openssl_error_string(): PHP keeps this queue across a process's requests; it is
	 * still one request's errors, about its keys and certificates. */
#ifdef HAVE_OPENSSL_EXT
	pw_openssl_globals *openssl = pw_module_globals(PW_GLOBALS_OPENSSL);
	if (openssl && openssl->errors) {
		openssl->errors->bottom = openssl->errors->top;
		ERR_clear_error();
	}
#endif
	/* mysqli_connect_error(), mysqli_connect_errno(); mysqli_report() as the baseline's */
#ifdef PW_HAVE_MYSQLI
	zend_mysqli_globals *mysqli = pw_module_globals(PW_GLOBALS_MYSQLI);
	if (mysqli) {
		if (mysqli->error_msg) {
			efree(mysqli->error_msg);
			mysqli->error_msg = NULL;
		}
		mysqli->error_no = 0;
		mysqli->report_mode = pw_base.mysqli_report;
	}
#endif
	/* opendir()'s handle that readdir() without one reads */
	pw_dir_globals *dir = TSRMG_BULK(dir_globals_id, pw_dir_globals *);
	if (dir->default_dir) {
		zend_list_delete(dir->default_dir);
		dir->default_dir = NULL;
	}
}

void pw_worker_reset_modules_shutdown(void)
{
	pw_hooks_run(false);
}

void pw_worker_reset_modules_startup(void)
{
	pw_hooks_run(true);
}

void pw_worker_reset_request_state(void)
{
	if (!pw_base.active) {
		return; /* the boot request: everything it left is the baseline */
	}
	pw_reset_core(); /* first: the settings, which mbstring's request startup reads */
	pw_reset_standard();
	pw_reset_date();
	pw_reset_mbstring();
	pw_reset_libxml();
	pw_reset_errors_of_extensions();
	pw_rs_env_back_to_baseline();
}
