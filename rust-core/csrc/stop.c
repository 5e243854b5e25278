/*
 * How a script learns that it must stop (a background worker's loop above all; see
 * src/runtime/background.rs): php_worker_stopping(), php_worker_wait_stop() and a
 * php_worker_on_stop() callback, which runs at the script's next instruction after the
 * stop was asked (interrupt.c calls pw_stop_callback_run), the way pcntl runs signal
 * handlers with pcntl_async_signals(). C because the callback is a PHP value, called
 * with call_user_function, which can bail out. See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <Zend/zend_exceptions.h>

#include "shim.h"

/* The callback php_worker_on_stop() registered on this thread; UNDEF when none. It is
 * request memory: the request's shutdown frees it (pw_stop_callback_release). */
static __thread zval pw_stop_callback;

/* At the interrupt (interrupt.c): runs the callback, once, if the thread was told to
 * stop and no exception is pending. */
void pw_stop_callback_run(void)
{
	if (Z_TYPE(pw_stop_callback) == IS_UNDEF || EG(exception) || !pw_rs_thread_stopping()) {
		return;
	}
	/* Once: the callback is forgotten before it runs (it may register another). */
	zval callback, retval;
	ZVAL_COPY_VALUE(&callback, &pw_stop_callback);
	ZVAL_UNDEF(&pw_stop_callback);
	ZVAL_UNDEF(&retval);
	call_user_function(NULL, NULL, &callback, &retval, 0, NULL);
	zval_ptr_dtor(&retval);
	zval_ptr_dtor(&callback);
}

void pw_stop_callback_forget(void)
{
	ZVAL_UNDEF(&pw_stop_callback);
}

/* At the request's shutdown (request.c): frees the callback with the request. */
void pw_stop_callback_release(void)
{
	zval_ptr_dtor(&pw_stop_callback);
	ZVAL_UNDEF(&pw_stop_callback);
}

void pw_php_stopping(zend_execute_data *execute_data, zval *return_value)
{
	ZEND_PARSE_PARAMETERS_NONE();
	RETURN_BOOL(pw_rs_thread_stopping());
}

void pw_php_wait_stop(zend_execute_data *execute_data, zval *return_value)
{
	double seconds;

	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_DOUBLE(seconds)
	ZEND_PARSE_PARAMETERS_END();

	if (!(seconds >= 0) || seconds > 1e9) {
		zend_argument_value_error(1, "must be between 0 and 1e9 seconds");
		RETURN_THROWS();
	}
	RETURN_BOOL(pw_rs_thread_wait_stop((uint64_t)(seconds * 1000.0)));
}

void pw_php_on_stop(zend_execute_data *execute_data, zval *return_value)
{
	zend_fcall_info fci = empty_fcall_info;
	zend_fcall_info_cache fcc = empty_fcall_info_cache;

	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_FUNC_OR_NULL(fci, fcc)
	ZEND_PARSE_PARAMETERS_END();

	zval_ptr_dtor(&pw_stop_callback);
	ZVAL_UNDEF(&pw_stop_callback);
	if (ZEND_FCI_INITIALIZED(fci)) {
		ZVAL_COPY(&pw_stop_callback, &fci.function_name);
		if (pw_rs_thread_stopping()) {
			/* Asked already: it runs as this function returns. */
			zend_atomic_bool_store_ex(&EG(vm_interrupt), true);
		}
	}
}
