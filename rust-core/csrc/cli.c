/*
 * The command line (`caddy php-cli`): one script run the way PHP's own CLI runs it, on
 * the PHP the server embeds, in a process of its own (never beside an engine). A SAPI
 * named "cli" with the CLI's settings, output to the standard output unbuffered, log
 * lines to the standard error, $argv, the STDIN/STDOUT/STDERR constants, the script's
 * exit status. php_worker's own extension is not loaded: its functions need a server.
 * C because it is PHP's whole startup, one request and shutdown, as PHP's CLI runs them.
 */
#include <php.h>
#include <SAPI.h>
#include <php_main.h>
#include <php_ini.h>
#include <php_variables.h>
#include <ext/standard/info.h>
#include <zend_extensions.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <main/build-defs.h>

#include "shim.h"

/* What php --ini prints; main/php_ini.c defines them, no installed header declares them. */
extern PHPAPI char *php_ini_opened_path, *php_ini_scanned_path, *php_ini_scanned_files;

/* What PHP's CLI forces whatever php.ini says; -d entries and php_ini come after. */
static const char pw_cli_forced_ini[] =
	"html_errors=0\n"
	"register_argc_argv=1\n"
	"implicit_flush=1\n"
	"output_buffering=0\n"
	"max_execution_time=0\n"
	"max_input_time=-1\n";

/* The signals a command-line script handles with pcntl (a queue worker: SIGALRM from
 * pcntl_alarm() for its job timeouts, SIGUSR2 to pause) must reach the script's own
 * thread: a signal sent to the process goes to any thread that does not block it, and
 * PHP's handler, run on one of Go's threads, finds no PHP context there (the process
 * crashed). So the command line blocks them from the start, before Go's runtime makes its
 * threads (they keep the mask for these signals, which Go does not use), and the
 * script's thread unblocks them. The server leaves them alone. Signals Go needs on every
 * thread (SIGTERM, SIGINT, SIGQUIT, SIGHUP) cannot be moved so: a script's pcntl
 * handlers for those are not supported. */
static void pw_cli_signal_set(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGALRM);
	sigaddset(set, SIGUSR1);
	sigaddset(set, SIGUSR2);
}

/* Whether the process runs PHP's command line: `caddy php-cli ...`, or the binary invoked
 * through its `php` link (`php artisan queue:work`; go-module/cli.go's phpCommand). */
static bool pw_cli_invoked(int argc, char **argv)
{
	if (argc < 1 || !argv || !argv[0]) {
		return false;
	}
	const char *base = strrchr(argv[0], '/');
	base = base ? base + 1 : argv[0];
	return strcmp(base, "php") == 0 || (argc >= 2 && argv[1] && strcmp(argv[1], "php-cli") == 0);
}

/* Runs before main, and so before Go's runtime, with the process's arguments (glibc
 * passes them to constructors); the process has one thread. */
__attribute__((constructor)) static void pw_cli_block_signals(int argc, char **argv, char **envp)
{
	(void)envp;
	if (pw_cli_invoked(argc, argv)) {
		sigset_t set;
		pw_cli_signal_set(&set);
		sigprocmask(SIG_BLOCK, &set, NULL);
	}
}

static int pw_cli_startup(sapi_module_struct *module)
{
	return php_module_startup(module, NULL);
}

static size_t pw_cli_ub_write(const char *str, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = write(STDOUT_FILENO, str + done, len - done);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			break; /* a closed pipe: PHP's CLI drops the rest too */
		}
		done += (size_t)n;
	}
	return done;
}

static void pw_cli_flush(void *server_context)
{
	(void)server_context;
}

static int pw_cli_send_headers(sapi_headers_struct *headers)
{
	(void)headers;
	return SAPI_HEADER_SENT_SUCCESSFULLY; /* a command line has no headers */
}

static void pw_cli_register_variables(zval *track_vars_array)
{
	php_import_environment_variables(track_vars_array);
	const char *script = SG(request_info).path_translated ? SG(request_info).path_translated : "";
	size_t len = strlen(script);
	char *value = estrndup(script, len);
	size_t new_len;
	static const char *const names[] = { "PHP_SELF", "SCRIPT_NAME", "SCRIPT_FILENAME", "PATH_TRANSLATED" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (sapi_module.input_filter(PARSE_SERVER, (char *)names[i], &value, len, &new_len)) {
			php_register_variable((char *)names[i], value, track_vars_array);
		}
	}
	efree(value);
	php_register_variable("DOCUMENT_ROOT", "", track_vars_array);
}

static void pw_cli_log_message(const char *message, int syslog_level)
{
	(void)syslog_level;
	fprintf(stderr, "%s\n", message);
	fflush(stderr);
}

/* The command's host defaults ("key=value\n" lines), for the command's run. */
static const char *pw_cli_host_defaults;

static void pw_cli_ini_defaults(HashTable *configuration_hash)
{
	pw_ini_default(configuration_hash, "display_errors", "1", 1);
	pw_ini_default_lines(configuration_hash, pw_cli_host_defaults);
}

static sapi_module_struct pw_cli_module = {
	"cli",                        /* name: what php_sapi_name() says, as scripts expect */
	"php_worker command line",    /* pretty name */
	pw_cli_startup,               /* startup */
	php_module_shutdown_wrapper,  /* shutdown */
	NULL,                         /* activate */
	NULL,                         /* deactivate */
	pw_cli_ub_write,              /* unbuffered write */
	pw_cli_flush,                 /* flush */
	NULL,                         /* get uid */
	NULL,                         /* getenv */
	php_error,                    /* error handler */
	NULL,                         /* header handler */
	pw_cli_send_headers,          /* send headers handler */
	NULL,                         /* send header handler */
	NULL,                         /* read POST data */
	NULL,                         /* read Cookies */
	pw_cli_register_variables,    /* register server variables */
	pw_cli_log_message,           /* log message */
	NULL,                         /* get request time */
	NULL,                         /* terminate process */
	STANDARD_SAPI_MODULE_PROPERTIES
};

/* STDIN, STDOUT and STDERR, as PHP's CLI defines them: streams over the process's own
 * descriptors, left open when a script closes them (later output still goes out). */
static void pw_cli_define_std_streams(void)
{
	static const struct {
		const char *name, *url, *mode;
	} std_streams[] = {
		{ "STDIN", "php://stdin", "rb" },
		{ "STDOUT", "php://stdout", "wb" },
		{ "STDERR", "php://stderr", "wb" },
	};
	for (size_t i = 0; i < sizeof(std_streams) / sizeof(std_streams[0]); i++) {
		php_stream *s = php_stream_open_wrapper_ex(std_streams[i].url, std_streams[i].mode, 0, NULL, NULL);
		if (!s) {
			continue;
		}
		s->flags |= PHP_STREAM_FLAG_NO_CLOSE;
		zend_constant c;
		php_stream_to_zval(s, &c.value);
		ZEND_CONSTANT_SET_FLAGS(&c, CONST_CS, 0);
		c.name = zend_string_init_interned(std_streams[i].name, strlen(std_streams[i].name), 0);
		zend_register_constant(&c);
	}
}

static int pw_cli_name_cmp(const void *a, const void *b)
{
	return strcasecmp(*(const char *const *)a, *(const char *const *)b);
}

/* What `php -m` prints: the modules, then the Zend extensions, each sorted by name. */
static void pw_cli_print_modules(void)
{
	uint32_t n = zend_hash_num_elements(&module_registry), count = 0;
	const char **names = emalloc(sizeof(char *) * (n + 1));
	zend_module_entry *module;
	ZEND_HASH_FOREACH_PTR(&module_registry, module) {
		names[count++] = module->name;
	} ZEND_HASH_FOREACH_END();
	qsort(names, count, sizeof(char *), pw_cli_name_cmp);
	php_printf("[PHP Modules]\n");
	for (uint32_t i = 0; i < count; i++) {
		php_printf("%s\n", names[i]);
	}
	efree(names);
	php_printf("\n[Zend Modules]\n");
	for (zend_llist_element *e = zend_extensions.head; e; e = e->next) {
		php_printf("%s\n", ((zend_extension *)e->data)->name);
	}
	php_printf("\n");
}

/* PHP_BINARY names `path` as given. PHP's own way (sapi_module.executable_location)
 * resolves links, and the command a link to this binary runs depends on the link's name:
 * `php` is PHP's command line, the binary's own name is Caddy's. Called after the module
 * startup registered the constant, on the thread that started PHP. */
static void pw_cli_set_binary(const char *path)
{
	zend_constant *c = zend_hash_str_find_ptr(EG(zend_constants), "PHP_BINARY", sizeof("PHP_BINARY") - 1);
	if (!c || Z_TYPE(c->value) != IS_STRING) {
		return;
	}
	zend_string_release_ex(Z_STR(c->value), 1);
	ZVAL_STR(&c->value, zend_string_init(path, strlen(path), 1));
}

int pw_shim_cli_run(const pw_cli_args *args)
{
	sigset_t signals;
	pw_cli_signal_set(&signals);
	pthread_sigmask(SIG_UNBLOCK, &signals, NULL); /* this thread takes them (above) */

	volatile int status = 0;
	size_t forced = sizeof(pw_cli_forced_ini) - 1, extra = args->ini_entries ? strlen(args->ini_entries) : 0;
	char *volatile ini = malloc(forced + extra + 1); /* live across zend_try's setjmp */
	if (!ini) {
		return 1;
	}
	memcpy(ini, pw_cli_forced_ini, forced);
	memcpy(ini + forced, args->ini_entries ? args->ini_entries : "", extra);
	ini[forced + extra] = '\0';

	if (!php_tsrm_startup()) {
		free(ini);
		return 1;
	}
	zend_signal_startup();
	sapi_startup(&pw_cli_module);
	pw_cli_module.ini_entries = ini; /* sapi_startup() clears them */
	pw_cli_module.php_ini_ignore_cwd = 1;
	pw_cli_module.php_ini_ignore = args->no_ini;
	pw_cli_module.php_ini_path_override = (char *)args->ini_path;
	pw_cli_host_defaults = args->ini_defaults;
	pw_cli_module.ini_defaults = pw_cli_ini_defaults;
	pw_cli_module.phpinfo_as_text = 1;
	if (pw_cli_module.startup(&pw_cli_module) == FAILURE) {
		fprintf(stderr, "php-cli: PHP did not start\n");
		sapi_shutdown();
		tsrm_shutdown();
		free(ini);
		return 1;
	}

	if (args->executable) {
		pw_cli_set_binary(args->executable);
	}

	SG(request_info).argc = args->argc;
	SG(request_info).argv = args->argv;
	SG(request_info).path_translated = args->mode == PW_CLI_MODE_SCRIPT ? (char *)args->argv[0] : NULL;
	SG(options) |= SAPI_OPTION_NO_CHDIR;
	if (php_request_startup() == FAILURE) {
		fprintf(stderr, "php-cli: PHP's request startup failed\n");
		status = 1;
	} else {
		pw_cli_define_std_streams();
		zend_try {
			switch (args->mode) {
			case PW_CLI_MODE_VERSION:
				php_printf("PHP %s (cli) (ZTS)\nCopyright (c) The PHP Group\n%s", PHP_VERSION, get_zend_version());
				break;
			case PW_CLI_MODE_MODULES:
				pw_cli_print_modules();
				break;
			case PW_CLI_MODE_INFO:
				php_print_info(PHP_INFO_ALL & ~PHP_INFO_CREDITS);
				break;
			case PW_CLI_MODE_CODE:
				zend_eval_string_ex((char *)args->code, NULL, "Command line code", 1);
				break;
			case PW_CLI_MODE_SCRIPT:
			case PW_CLI_MODE_STDIN: {
				zend_file_handle file;
				if (args->mode == PW_CLI_MODE_STDIN) {
					zend_stream_init_fp(&file, stdin, args->argv[0]);
					file.primary_script = 1;
				} else {
					zend_stream_init_filename(&file, args->argv[0]);
				}
				CG(skip_shebang) = 1; /* artisan and friends start with #!/usr/bin/env php */
				php_execute_script(&file);
				zend_destroy_file_handle(&file);
				break;
			}
			case PW_CLI_MODE_LINT: {
				zend_file_handle file;
				zend_stream_init_filename(&file, args->argv[0]);
				if (php_lint_script(&file) == SUCCESS) {
					zend_printf("No syntax errors detected in %s\n", args->argv[0]);
				} else {
					zend_printf("Errors parsing %s\n", args->argv[0]);
					EG(exit_status) = 255;
				}
				zend_destroy_file_handle(&file);
				break;
			}
			case PW_CLI_MODE_INI:
				zend_printf("Configuration File (php.ini) Path: %s\n", PHP_CONFIG_FILE_PATH);
				zend_printf("Loaded Configuration File:         %s\n", php_ini_opened_path ? php_ini_opened_path : "(none)");
				zend_printf("Scan for additional .ini files in: %s\n", php_ini_scanned_path ? php_ini_scanned_path : "(none)");
				zend_printf("Additional .ini files parsed:      %s\n", php_ini_scanned_files ? php_ini_scanned_files : "(none)");
				break;
			}
		} zend_end_try();
		status = EG(exit_status);
		php_request_shutdown(NULL);
	}
	SG(request_info).argv = NULL;
	SG(request_info).path_translated = NULL;
	pw_cli_module.shutdown(&pw_cli_module);
	sapi_shutdown();
	tsrm_shutdown();
	pw_cli_module.ini_entries = NULL;
	pw_cli_host_defaults = NULL;
	free(ini);
	return status;
}
