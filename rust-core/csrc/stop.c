/*
 * How a script learns that it must stop (a background worker's loop above all; see
 * src/runtime/background.rs): php_worker_stopping(), php_worker_wait_stop() and a
 * php_worker_on_stop() callback, which runs at the script's next instruction after the
 * stop was asked (interrupt.c calls pw_stop_callback_run), the way pcntl runs signal
 * handlers with pcntl_async_signals(). C because the callback is a PHP value, called
 * with call_user_function, which can bail out. See shim.h.
 *
 * pcntl_signal() in the server is replaced here too. PHP's own sets the handler of the
 * whole process: a script's SIGTERM handler (Laravel's queue:work, Symfony Messenger and
 * Horizon register one) took the signal away from Go's runtime, which Caddy stops by,
 * and PHP's handler then ran on one of Go's threads, which have no PHP context: the
 * process crashed at its next SIGTERM, every request in flight lost. A script in the
 * server never receives a process signal. Its handlers for the signals that ask a
 * process to end (SIGTERM, SIGINT, SIGQUIT) run when php_worker tells the script to stop
 * instead, as php_worker_on_stop() callbacks, so those workers stop between two jobs as
 * under a supervisor; handlers for any other signal are accepted and never called.
 * `caddy php-cli` keeps PHP's pcntl_signal() (see cli.c).
 */
#include <php.h>
#include <SAPI.h>
#include <Zend/zend_exceptions.h>

#include <signal.h>

#include "shim.h"

/* The callbacks that run when this thread is told to stop; UNDEF when none: the one
 * php_worker_on_stop() registered, then the script's pcntl_signal() handlers for the
 * signals that ask a process to end, in the order a supervisor sends them. They are
 * request memory: the request's shutdown frees them (pw_stop_callback_release). */
enum { PW_ON_STOP, PW_ON_SIGTERM, PW_ON_SIGINT, PW_ON_SIGQUIT, PW_STOP_CALLBACKS };
static const int pw_stop_signals[PW_STOP_CALLBACKS] = { 0, SIGTERM, SIGINT, SIGQUIT };
static __thread zval pw_stop_callbacks[PW_STOP_CALLBACKS];

/* At the interrupt (interrupt.c): runs the callbacks, each once, if the thread was told
 * to stop and no exception is pending. A signal handler gets what pcntl gives it: the
 * signal's number and its information (here only the number). */
void pw_stop_callback_run(void)
{
	for (int i = 0; i < PW_STOP_CALLBACKS; i++) {
		if (Z_TYPE(pw_stop_callbacks[i]) == IS_UNDEF || EG(exception) || !pw_rs_thread_stopping()) {
			continue;
		}
		/* Once: the callback is forgotten before it runs (it may register another). */
		zval callback, retval, args[2];
		uint32_t argc = 0;
		ZVAL_COPY_VALUE(&callback, &pw_stop_callbacks[i]);
		ZVAL_UNDEF(&pw_stop_callbacks[i]);
		ZVAL_UNDEF(&retval);
		if (pw_stop_signals[i] != 0) {
			ZVAL_LONG(&args[0], pw_stop_signals[i]);
			array_init(&args[1]);
			add_assoc_long(&args[1], "signo", pw_stop_signals[i]);
			argc = 2;
		}
		call_user_function(NULL, NULL, &callback, &retval, argc, args);
		if (argc) {
			zval_ptr_dtor(&args[1]);
		}
		zval_ptr_dtor(&retval);
		zval_ptr_dtor(&callback);
	}
}

void pw_stop_callback_forget(void)
{
	for (int i = 0; i < PW_STOP_CALLBACKS; i++) {
		ZVAL_UNDEF(&pw_stop_callbacks[i]);
	}
}

/* At the request's shutdown (request.c): frees the callbacks with the request. */
void pw_stop_callback_release(void)
{
	for (int i = 0; i < PW_STOP_CALLBACKS; i++) {
		zval_ptr_dtor(&pw_stop_callbacks[i]);
		ZVAL_UNDEF(&pw_stop_callbacks[i]);
	}
}

/* Keeps `callback` (or none, for NULL) in its slot; when the thread was told to stop
 * already, it runs as the calling function returns. */
static void pw_stop_callback_set(int slot, zval *callback)
{
	zval_ptr_dtor(&pw_stop_callbacks[slot]);
	ZVAL_UNDEF(&pw_stop_callbacks[slot]);
	if (callback) {
		ZVAL_COPY(&pw_stop_callbacks[slot], callback);
		if (pw_rs_thread_stopping()) {
			zend_atomic_bool_store_ex(&EG(vm_interrupt), true);
		}
	}
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

	pw_stop_callback_set(PW_ON_STOP, ZEND_FCI_INITIALIZED(fci) ? &fci.function_name : NULL);
}

/* pcntl_signal(int $signal, callable|int $handler, bool $restart_syscalls = true): bool,
 * in the server (see the top of this file). It checks its arguments as pcntl's does. */
void pw_php_pcntl_signal(zend_execute_data *execute_data, zval *return_value)
{
	zend_long signo;
	zval *handle;
	bool restart_syscalls = true;

	ZEND_PARSE_PARAMETERS_START(2, 3)
		Z_PARAM_LONG(signo)
		Z_PARAM_ZVAL(handle)
		Z_PARAM_OPTIONAL
		Z_PARAM_BOOL(restart_syscalls)
	ZEND_PARSE_PARAMETERS_END();
	(void)restart_syscalls;

	if (signo < 1 || signo >= NSIG) {
		zend_argument_value_error(1, "must be greater than or equal to 1 and less than %d", NSIG);
		RETURN_THROWS();
	}
	bool callable = false;
	if (Z_TYPE_P(handle) == IS_LONG) {
		if (Z_LVAL_P(handle) != (zend_long)SIG_DFL && Z_LVAL_P(handle) != (zend_long)SIG_IGN) {
			zend_argument_value_error(2, "must be either SIG_DFL or SIG_IGN when an integer value is given");
			RETURN_THROWS();
		}
	} else if (zend_is_callable(handle, 0, NULL)) {
		callable = true;
	} else {
		zend_argument_type_error(2, "must be of type callable|int, %s given", zend_zval_type_name(handle));
		RETURN_THROWS();
	}
	for (int i = PW_ON_SIGTERM; i < PW_STOP_CALLBACKS; i++) {
		if (pw_stop_signals[i] == signo) {
			pw_stop_callback_set(i, callable ? handle : NULL);
		}
	}
	RETURN_TRUE;
}
