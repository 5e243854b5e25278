/*
 * Sending tasks to a task worker (src/runtime/task.rs): php_worker_task() and
 * php_worker_tasks(), and the exceptions their failures come back as, whose classes
 * module startup registers (pw_task_startup). The task worker's side,
 * php_worker_handle_task(), is in worker.c. C because these take and make PHP values
 * and exceptions, and can bail out. See shim.h.
 */
#include <php.h>
#include <SAPI.h>
#include <ext/spl/spl_exceptions.h>
#include <Zend/zend_exceptions.h>

#include "shim.h"

/* PhpWorker\TaskException extends RuntimeException: a task failed or was refused.
 * PhpWorker\TaskTimeoutException extends it: a task did not finish in time. */
static zend_class_entry *pw_ce_task_exception;
static zend_class_entry *pw_ce_task_timeout;

void pw_task_startup(void)
{
	zend_class_entry ce;
	INIT_NS_CLASS_ENTRY(ce, "PhpWorker", "TaskException", NULL);
	pw_ce_task_exception = zend_register_internal_class_ex(&ce, spl_ce_RuntimeException);
	INIT_NS_CLASS_ENTRY(ce, "PhpWorker", "TaskTimeoutException", NULL);
	pw_ce_task_timeout = zend_register_internal_class_ex(&ce, pw_ce_task_exception);
}

/* The default timeout of a task, in seconds. */
#define PW_TASK_TIMEOUT_DEFAULT 30.0

static bool pw_task_timeout_ms(double seconds, uint32_t arg, uint64_t *ms)
{
	if (!(seconds > 0) || seconds > 1e9) {
		zend_argument_value_error(arg, "must be greater than 0 (seconds)");
		return false;
	}
	*ms = (uint64_t)(seconds * 1000.0);
	return true;
}

/* The exception object for a failed task: "task <key> on worker <name> <why>". */
static void pw_task_error(zval *out, const pw_task_answer *answer, zend_string *worker, zend_string *key)
{
	zend_class_entry *ce = answer->status == PW_TASK_TIMEOUT ? pw_ce_task_timeout : pw_ce_task_exception;
	const char *verb = answer->status == PW_TASK_REFUSED ? "was refused" : answer->status == PW_TASK_TIMEOUT ? "timed out" : "failed";
	zend_string *message = zend_strpprintf(0, "task %s on worker %s %s: %.*s", ZSTR_VAL(key), ZSTR_VAL(worker), verb,
	                                       (int)answer->len, answer->data);
	object_init_ex(out, ce);
	zval text;
	ZVAL_STR(&text, message);
	zend_update_property_ex(zend_ce_exception, Z_OBJ_P(out), ZSTR_KNOWN(ZEND_STR_MESSAGE), &text);
	zval_ptr_dtor(&text);
}

/* php_worker_task(string $worker, string $payload, float $timeout = 30): string */
void pw_php_task(zend_execute_data *execute_data, zval *return_value)
{
	zend_string *worker, *payload;
	double timeout = PW_TASK_TIMEOUT_DEFAULT;
	uint64_t ms;

	ZEND_PARSE_PARAMETERS_START(2, 3)
		Z_PARAM_STR(worker)
		Z_PARAM_STR(payload)
		Z_PARAM_OPTIONAL
		Z_PARAM_DOUBLE(timeout)
	ZEND_PARSE_PARAMETERS_END();

	if (!pw_task_timeout_ms(timeout, 3, &ms)) {
		RETURN_THROWS();
	}
	pw_task_payload p = {ZSTR_VAL(payload), ZSTR_LEN(payload)};
	pw_task_answer answer;
	pw_rs_tasks_run(ZSTR_VAL(worker), ZSTR_LEN(worker), &p, 1, ms, &answer);
	if (answer.status == PW_TASK_OK) {
		RETURN_STRINGL(answer.data, answer.len);
	}
	zval ex;
	zend_string *key = zend_string_init("0", 1, 0);
	pw_task_error(&ex, &answer, worker, key);
	zend_string_release(key);
	zend_throw_exception_object(&ex);
	RETURN_THROWS();
}

/* php_worker_tasks(string $worker, array $payloads, float $timeout = 30): array
 * Every payload runs as a task at once; the answer has the payloads' keys, each a
 * string or a PhpWorker\TaskException (not thrown). */
void pw_php_tasks(zend_execute_data *execute_data, zval *return_value)
{
	zend_string *worker;
	HashTable *payloads;
	double timeout = PW_TASK_TIMEOUT_DEFAULT;
	uint64_t ms;

	ZEND_PARSE_PARAMETERS_START(2, 3)
		Z_PARAM_STR(worker)
		Z_PARAM_ARRAY_HT(payloads)
		Z_PARAM_OPTIONAL
		Z_PARAM_DOUBLE(timeout)
	ZEND_PARSE_PARAMETERS_END();

	if (!pw_task_timeout_ms(timeout, 3, &ms)) {
		RETURN_THROWS();
	}
	uint32_t n = zend_hash_num_elements(payloads);
	array_init_size(return_value, n);
	if (n == 0) {
		return;
	}
	zval *value;
	ZEND_HASH_FOREACH_VAL(payloads, value) {
		if (Z_TYPE_P(value) != IS_STRING) {
			zend_argument_type_error(2, "must hold strings only, %s given", zend_zval_type_name(value));
			RETURN_THROWS();
		}
	} ZEND_HASH_FOREACH_END();

	pw_task_payload *p = safe_emalloc(n, sizeof(*p), 0);
	pw_task_answer *answers = safe_emalloc(n, sizeof(*answers), 0);
	uint32_t i = 0;
	ZEND_HASH_FOREACH_VAL(payloads, value) {
		p[i++] = (pw_task_payload){Z_STRVAL_P(value), Z_STRLEN_P(value)};
	} ZEND_HASH_FOREACH_END();
	pw_rs_tasks_run(ZSTR_VAL(worker), ZSTR_LEN(worker), p, n, ms, answers);
	efree(p);

	zend_ulong index;
	zend_string *name;
	i = 0;
	ZEND_HASH_FOREACH_KEY(payloads, index, name) {
		zval entry;
		const pw_task_answer *answer = &answers[i++];
		if (answer->status == PW_TASK_OK) {
			ZVAL_STRINGL(&entry, answer->data, answer->len);
		} else {
			zend_string *key = name ? zend_string_copy(name) : zend_long_to_str((zend_long)index);
			pw_task_error(&entry, answer, worker, key);
			zend_string_release(key);
		}
		if (name) {
			zend_hash_update(Z_ARRVAL_P(return_value), name, &entry);
		} else {
			zend_hash_index_update(Z_ARRVAL_P(return_value), index, &entry);
		}
	} ZEND_HASH_FOREACH_END();
	efree(answers);
}
