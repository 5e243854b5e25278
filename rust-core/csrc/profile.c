/*
 * The profiler's sample, taken by a PHP thread of its own stack (see
 * src/runtime/sample.rs): the sampler thread only sets the thread's EG(vm_interrupt),
 * and at its next instruction the thread walks EG(current_execute_data) here, called
 * from the interrupt hook (interrupt.c). The walk is synchronous on the thread, at an
 * instruction boundary, so no frame is freed during it; it only reads, and allocates no
 * PHP memory, so nothing here can bail out. C because the stack is PHP's executor
 * globals and structs, which only PHP's headers describe. See shim.h.
 */
#include <php.h>
#include <SAPI.h>

#include "shim.h"

/* Frames kept per sample; deeper stacks end in a "truncated" frame. */
#define PW_PROFILE_DEPTH 128

void pw_profile_interrupt(void)
{
	if (!pw_rs_profile_pending()) {
		return;
	}
	pw_profile_frame frames[PW_PROFILE_DEPTH];
	size_t n = 0;
	bool truncated = false;
	for (zend_execute_data *ex = EG(current_execute_data); ex; ex = ex->prev_execute_data) {
		zend_function *func = ex->func;
		if (!func) {
			continue; /* a dummy frame of zend_call_function */
		}
		if (n == PW_PROFILE_DEPTH) {
			truncated = true;
			break;
		}
		pw_profile_frame *f = &frames[n++];
		memset(f, 0, sizeof(*f));
		zend_string *name = func->common.function_name;
		if (name) {
			f->function = ZSTR_VAL(name);
			f->function_len = ZSTR_LEN(name);
			if (func->common.scope && func->common.scope->name) {
				f->scope = ZSTR_VAL(func->common.scope->name);
				f->scope_len = ZSTR_LEN(func->common.scope->name);
			}
		}
		/* An internal function has no file; its caller's frame, next, has the line. */
		if (ZEND_USER_CODE(func->type) && func->op_array.filename) {
			f->file = ZSTR_VAL(func->op_array.filename);
			f->file_len = ZSTR_LEN(func->op_array.filename);
			f->line = ex->opline ? ex->opline->lineno : func->op_array.line_start;
		}
	}
	pw_rs_profile_sample(frames, n, truncated);
}
