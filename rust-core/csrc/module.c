/*
 * The php_worker PHP module as PHP loads it: its startup, once per engine start (each
 * file sets up its own part: functions.c, interrupt.c, task.c), and its function table:
 * every PHP function it adds, with its signature (arginfo) as PHP's reflection and
 * argument checks see it. The handlers are in functions.c, worker.c, stop.c, task.c and
 * store.c; PHP alone calls them, so Rust never declares them: src/php/module.rs only
 * hands this table to PHP. Its hooks at a request's end are request.c's. C because
 * the table is built with PHP's arginfo macros.
 */
#include <php.h>
#include <SAPI.h>

#include "shim.h"

/* frankenphp_handle_request(callable $callback): bool */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_handle_request, 0, 1, _IS_BOOL, 0)
	ZEND_ARG_TYPE_INFO(0, callback, IS_CALLABLE, 0)
ZEND_END_ARG_INFO()

/* headers_send(int $status = 200): int */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_headers_send, 0, 0, IS_LONG, 0)
	ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, status, IS_LONG, 0, "200")
ZEND_END_ARG_INFO()

/* frankenphp_finish_request(): bool */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_finish_request, 0, 0, _IS_BOOL, 0)
ZEND_END_ARG_INFO()

/* frankenphp_request_headers(): array, frankenphp_response_headers(): array */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_headers, 0, 0, IS_ARRAY, 0)
ZEND_END_ARG_INFO()

/* frankenphp_log(string $message, int $level = FRANKENPHP_LOG_LEVEL_INFO, array $context = []): void */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_log, 0, 1, IS_VOID, 0)
	ZEND_ARG_TYPE_INFO(0, message, IS_STRING, 0)
	ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, level, IS_LONG, 0, "FRANKENPHP_LOG_LEVEL_INFO")
	ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, context, IS_ARRAY, 0, "[]")
ZEND_END_ARG_INFO()

/* php_worker_{local,shared}_get(string $key, mixed $default = null): mixed */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_store_get, 0, 1, IS_MIXED, 0)
	ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
	ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, default, IS_MIXED, 0, "null")
ZEND_END_ARG_INFO()

/* php_worker_{local,shared}_{put,add}(string $key, mixed $value, int $ttl = 0): bool */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_store_put, 0, 2, _IS_BOOL, 0)
	ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
	ZEND_ARG_TYPE_INFO(0, value, IS_MIXED, 0)
	ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, ttl, IS_LONG, 0, "0")
ZEND_END_ARG_INFO()

/* php_worker_{local,shared}_increment(string $key, int $by = 1): int|false */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_MASK_EX(pw_arginfo_store_increment, 0, 1, MAY_BE_LONG | MAY_BE_FALSE)
	ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
	ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, by, IS_LONG, 0, "1")
ZEND_END_ARG_INFO()

/* php_worker_{local,shared}_touch(string $key, int $ttl): bool */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_store_touch, 0, 2, _IS_BOOL, 0)
	ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
	ZEND_ARG_TYPE_INFO(0, ttl, IS_LONG, 0)
ZEND_END_ARG_INFO()

/* php_worker_{local,shared}_forget(string $key): bool */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_store_forget, 0, 1, _IS_BOOL, 0)
	ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
ZEND_END_ARG_INFO()

/* php_worker_{local,shared}_flush(): bool */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_store_flush, 0, 0, _IS_BOOL, 0)
ZEND_END_ARG_INFO()

/* php_worker_{local,shared}_count(): int */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_store_count, 0, 0, IS_LONG, 0)
ZEND_END_ARG_INFO()

/* php_worker_handle_task(callable $handler): bool */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_handle_task, 0, 1, _IS_BOOL, 0)
	ZEND_ARG_TYPE_INFO(0, handler, IS_CALLABLE, 0)
ZEND_END_ARG_INFO()

/* php_worker_task(string $worker, string $payload, float $timeout = 30.0): string */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_task, 0, 2, IS_STRING, 0)
	ZEND_ARG_TYPE_INFO(0, worker, IS_STRING, 0)
	ZEND_ARG_TYPE_INFO(0, payload, IS_STRING, 0)
	ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, timeout, IS_DOUBLE, 0, "30.0")
ZEND_END_ARG_INFO()

/* php_worker_tasks(string $worker, array $payloads, float $timeout = 30.0): array */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_tasks, 0, 2, IS_ARRAY, 0)
	ZEND_ARG_TYPE_INFO(0, worker, IS_STRING, 0)
	ZEND_ARG_TYPE_INFO(0, payloads, IS_ARRAY, 0)
	ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, timeout, IS_DOUBLE, 0, "30.0")
ZEND_END_ARG_INFO()

/* php_worker_stopping(): bool */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_stopping, 0, 0, _IS_BOOL, 0)
ZEND_END_ARG_INFO()

/* php_worker_wait_stop(float $seconds): bool */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_wait_stop, 0, 1, _IS_BOOL, 0)
	ZEND_ARG_TYPE_INFO(0, seconds, IS_DOUBLE, 0)
ZEND_END_ARG_INFO()

/* php_worker_on_stop(?callable $callback): void */
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(pw_arginfo_on_stop, 0, 1, IS_VOID, 0)
	ZEND_ARG_TYPE_INFO(0, callback, IS_CALLABLE, 1)
ZEND_END_ARG_INFO()

#if PHP_VERSION_ID >= 80400 /* 8.4's entries add frameless function infos and a doc comment */
#define PW_FUNCTION(name, handler, arginfo) ZEND_RAW_FENTRY(name, handler, arginfo, 0, NULL, NULL)
#else
#define PW_FUNCTION(name, handler, arginfo) ZEND_RAW_FENTRY(name, handler, arginfo, 0)
#endif

#define PW_STORE_ENTRIES(scope)                                                                         \
	PW_FUNCTION("php_worker_" #scope "_get", pw_php_##scope##_get, pw_arginfo_store_get)                \
	PW_FUNCTION("php_worker_" #scope "_put", pw_php_##scope##_put, pw_arginfo_store_put)                \
	PW_FUNCTION("php_worker_" #scope "_add", pw_php_##scope##_add, pw_arginfo_store_put)                \
	PW_FUNCTION("php_worker_" #scope "_increment", pw_php_##scope##_increment, pw_arginfo_store_increment) \
	PW_FUNCTION("php_worker_" #scope "_touch", pw_php_##scope##_touch, pw_arginfo_store_touch)          \
	PW_FUNCTION("php_worker_" #scope "_forget", pw_php_##scope##_forget, pw_arginfo_store_forget)       \
	PW_FUNCTION("php_worker_" #scope "_flush", pw_php_##scope##_flush, pw_arginfo_store_flush)          \
	PW_FUNCTION("php_worker_" #scope "_count", pw_php_##scope##_count, pw_arginfo_store_count)

static const zend_function_entry pw_functions[] = {
	PW_FUNCTION("frankenphp_handle_request", pw_php_handle_request, pw_arginfo_handle_request)
	PW_FUNCTION("headers_send", pw_php_headers_send, pw_arginfo_headers_send)
	/* php-fpm's name too */
	PW_FUNCTION("frankenphp_finish_request", pw_php_finish_request, pw_arginfo_finish_request)
	PW_FUNCTION("fastcgi_finish_request", pw_php_finish_request, pw_arginfo_finish_request)
	/* Apache's names too */
	PW_FUNCTION("frankenphp_request_headers", pw_php_request_headers, pw_arginfo_headers)
	PW_FUNCTION("getallheaders", pw_php_request_headers, pw_arginfo_headers)
	PW_FUNCTION("apache_request_headers", pw_php_request_headers, pw_arginfo_headers)
	PW_FUNCTION("frankenphp_response_headers", pw_php_response_headers, pw_arginfo_headers)
	PW_FUNCTION("apache_response_headers", pw_php_response_headers, pw_arginfo_headers)
	PW_FUNCTION("frankenphp_log", pw_php_frankenphp_log, pw_arginfo_log)
	PW_FUNCTION("php_worker_handle_task", pw_php_handle_task, pw_arginfo_handle_task)
	PW_FUNCTION("php_worker_task", pw_php_task, pw_arginfo_task)
	PW_FUNCTION("php_worker_tasks", pw_php_tasks, pw_arginfo_tasks)
	PW_FUNCTION("php_worker_stopping", pw_php_stopping, pw_arginfo_stopping)
	PW_FUNCTION("php_worker_wait_stop", pw_php_wait_stop, pw_arginfo_wait_stop)
	PW_FUNCTION("php_worker_on_stop", pw_php_on_stop, pw_arginfo_on_stop)
	PW_STORE_ENTRIES(local)
	PW_STORE_ENTRIES(shared)
	ZEND_FE_END
};

const void *pw_shim_functions(void)
{
	return pw_functions;
}

/* A module named frankenphp beside php_worker's, with no function of its own: the
 * functions FrankenPHP's module has are php_worker's (above), and apps written for
 * FrankenPHP look for its module by name (extension_loaded('frankenphp')) before they
 * use them. Its version is that of the FrankenPHP release whose PHP API php_worker
 * implements, so the version checks of such apps pass. */
static zend_module_entry pw_frankenphp_module = {
	STANDARD_MODULE_HEADER,
	"frankenphp",
	NULL, /* functions: php_worker's module has them */
	NULL, NULL, NULL, NULL, NULL,
	"1.12.7",
	STANDARD_MODULE_PROPERTIES,
};

int pw_register_frankenphp_module(void)
{
	return zend_register_internal_module(&pw_frankenphp_module) ? SUCCESS : FAILURE;
}

int pw_shim_module_startup(int type, int module_number)
{
	pw_functions_startup(module_number);
	pw_interrupt_startup();
	pw_task_startup();
	return SUCCESS;
}
