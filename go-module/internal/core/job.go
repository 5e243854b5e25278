// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package core

// #include "php_worker.h"
import "C"

import "time"

// JobOutcome is how a scheduled job's run ended (php_worker_job_outcome_t).
type JobOutcome struct {
	ExitStatus  int  // exit(n); 255 after a fatal error
	Fatal       bool // a fatal error or an uncaught exception ended it
	FailedToRun bool // PHP failed around the script (its request startup or shutdown)
	Duration    time.Duration
}

// RunJob runs a scheduled job's script once (spec: the JSON of php_worker_job_run) and
// waits for it.
func (e *Engine) RunJob(spec []byte) (JobOutcome, error) {
	var outcome C.php_worker_job_outcome_t
	p, n, free := bytesArg(spec)
	defer free()
	err := e.call(func(ptr *C.php_worker_engine_t) *C.php_worker_error_t {
		return C.php_worker_job_run(ptr, p, n, &outcome)
	})
	return JobOutcome{
		ExitStatus:  int(outcome.exit_status),
		Fatal:       bool(outcome.fatal),
		FailedToRun: bool(outcome.failed_to_run),
		Duration:    time.Duration(outcome.duration_ms) * time.Millisecond,
	}, err
}
