// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package core

// #include "php_worker.h"
import "C"

// Code is what php_worker_request_submit returns.
type Code int32

// The codes of php_worker_request_submit.
const (
	OK             Code = C.PHP_WORKER_OK
	ErrStopped     Code = C.PHP_WORKER_ERR_STOPPED
	ErrQueueFull   Code = C.PHP_WORKER_ERR_QUEUE_FULL
	ErrInvalid     Code = C.PHP_WORKER_ERR_INVALID
	ErrUnknownPool Code = C.PHP_WORKER_ERR_UNKNOWN_POOL
	ErrInternal    Code = C.PHP_WORKER_ERR_INTERNAL
)

// ClassicPool is the pool of the threads that run classic scripts.
const ClassicPool uint32 = C.PHP_WORKER_CLASSIC_POOL

// RequestBodyComplete is the submission flag of a request whose whole body travels in
// its buffer.
const RequestBodyComplete uint32 = C.PHP_WORKER_REQUEST_BODY_COMPLETE

// RequestOneShotWorker is the submission flag of a worker script run for one request,
// in a request of its own, on the classic pool.
const RequestOneShotWorker uint32 = C.PHP_WORKER_REQUEST_ONE_SHOT_WORKER

// The flags of a response call (Response.Flags).
const (
	ResponseFlush         uint32 = C.PHP_WORKER_RESPONSE_FLUSH
	ResponseDone          uint32 = C.PHP_WORKER_RESPONSE_DONE
	ResponseInformational uint32 = C.PHP_WORKER_RESPONSE_INFORMATIONAL
	ResponseExpired       uint32 = C.PHP_WORKER_RESPONSE_EXPIRED
	ResponseRefused       uint32 = C.PHP_WORKER_RESPONSE_REFUSED
)

// Why the core handed a request back unserved (Response.Refusal).
const (
	RefusedStopped     uint32 = C.PHP_WORKER_REFUSED_STOPPED
	RefusedBootFailing uint32 = C.PHP_WORKER_REFUSED_BOOT_FAILING
	RefusedBody        uint32 = C.PHP_WORKER_REFUSED_BODY
	RefusedWithdrawn   uint32 = C.PHP_WORKER_REFUSED_WITHDRAWN
)

// Refusals only the host makes, for requests given to a child process
// (internal/cluster); above the core's codes.
const (
	// The child process running (or holding) the request ended without answering it.
	RefusedProcessDied uint32 = 100 + iota
	// The child's pool queue was full (the core's ErrQueueFull, reported late).
	RefusedQueueFull
)

// The fixed fields that start every request (php_worker_field), in this order.
const (
	FieldMethod         = C.PHP_WORKER_FIELD_METHOD
	FieldRequestURI     = C.PHP_WORKER_FIELD_REQUEST_URI
	FieldQueryString    = C.PHP_WORKER_FIELD_QUERY_STRING
	FieldContentType    = C.PHP_WORKER_FIELD_CONTENT_TYPE
	FieldScriptFilename = C.PHP_WORKER_FIELD_SCRIPT_FILENAME
	FieldPathTranslated = C.PHP_WORKER_FIELD_PATH_TRANSLATED
	FieldCookie         = C.PHP_WORKER_FIELD_COOKIE
	FieldAuthorization  = C.PHP_WORKER_FIELD_AUTHORIZATION
	FieldProtocol       = C.PHP_WORKER_FIELD_PROTOCOL
	FieldCount          = C.PHP_WORKER_FIELD_COUNT
)

// The modes of php_worker_cli_run.
const (
	CLIScript  = uint32(C.PHP_WORKER_CLI_SCRIPT)
	CLICode    = uint32(C.PHP_WORKER_CLI_CODE)
	CLIVersion = uint32(C.PHP_WORKER_CLI_VERSION)
	CLIModules = uint32(C.PHP_WORKER_CLI_MODULES)
	CLIInfo    = uint32(C.PHP_WORKER_CLI_INFO)
	CLILint    = uint32(C.PHP_WORKER_CLI_LINT)
	CLIStdin   = uint32(C.PHP_WORKER_CLI_STDIN)
	CLIIni     = uint32(C.PHP_WORKER_CLI_INI)
)
