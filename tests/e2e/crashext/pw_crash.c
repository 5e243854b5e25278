/*
 * pw_crash: an extension that crashes the process running it, the way a faulty
 * extension does, for the crash-containment tests (tests/e2e/test_processes.py).
 *
 *   pw_crash("segv")   writes through a NULL pointer (SIGSEGV)
 *   pw_crash("abort")  calls abort() (SIGABRT), as a failed assertion does
 *   pw_crash("stack")  recurses in C until the stack overflows (SIGSEGV on the guard page)
 *   pw_crash("exit")   calls _exit(3) from C, past PHP and the server
 *
 * and with pw_crash.at_startup=1 in php.ini it calls abort() while PHP starts, as an
 * extension does that a new setting breaks.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <stdlib.h>
#include <unistd.h>
#include "php.h"

static volatile int *null_pointer;

/* Recursion the compiler cannot turn into a loop: each frame keeps a buffer it reads. */
static __attribute__((noinline)) int overflow(int depth)
{
	volatile char frame[4096];
	frame[depth % sizeof(frame)] = (char)depth;
	return overflow(depth + 1) + frame[(depth * 7) % sizeof(frame)];
}

PHP_FUNCTION(pw_crash)
{
	zend_string *how;
	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_STR(how)
	ZEND_PARSE_PARAMETERS_END();
	if (zend_string_equals_literal(how, "segv")) {
		*null_pointer = 1;
	} else if (zend_string_equals_literal(how, "abort")) {
		abort();
	} else if (zend_string_equals_literal(how, "stack")) {
		RETURN_LONG(overflow(0));
	} else if (zend_string_equals_literal(how, "exit")) {
		_exit(3);
	}
	zend_argument_value_error(1, "must be segv, abort, stack or exit");
}

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_pw_crash, 0, 1, IS_LONG, 0)
	ZEND_ARG_TYPE_INFO(0, how, IS_STRING, 0)
ZEND_END_ARG_INFO()

static const zend_function_entry pw_crash_functions[] = {
	PHP_FE(pw_crash, arginfo_pw_crash)
	PHP_FE_END
};

PHP_INI_BEGIN()
	PHP_INI_ENTRY("pw_crash.at_startup", "0", PHP_INI_SYSTEM, NULL)
PHP_INI_END()

static PHP_MINIT_FUNCTION(pw_crash)
{
	REGISTER_INI_ENTRIES();
	if (INI_BOOL("pw_crash.at_startup")) {
		abort();
	}
	return SUCCESS;
}

static PHP_MSHUTDOWN_FUNCTION(pw_crash)
{
	UNREGISTER_INI_ENTRIES();
	return SUCCESS;
}

zend_module_entry pw_crash_module_entry = {
	STANDARD_MODULE_HEADER,
	"pw_crash",
	pw_crash_functions,
	PHP_MINIT(pw_crash), PHP_MSHUTDOWN(pw_crash), NULL, NULL, NULL,
	"0.1",
	STANDARD_MODULE_PROPERTIES
};

#ifdef COMPILE_DL_PW_CRASH
#ifdef ZTS
ZEND_TSRMLS_CACHE_DEFINE()
#endif
ZEND_GET_MODULE(pw_crash)
#endif
