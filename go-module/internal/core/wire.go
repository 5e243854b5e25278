// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package core

// #include <stdlib.h>
// #include "php_worker.h"
import "C"

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// The wire of a child process (php_worker_wire_open): in a child, the core serves the
// requests the Caddy process sends, and Go only its control calls. The frame kinds and
// layouts are the ABI's (PHP_WORKER_WIRE_*); internal/cluster speaks them on the Caddy
// process's side.

// The frame kinds and limits of the wire, from the ABI.
const (
	WireCall         = uint8(C.PHP_WORKER_WIRE_CALL)
	WireSubmit       = uint8(C.PHP_WORKER_WIRE_SUBMIT)
	WireCancel       = uint8(C.PHP_WORKER_WIRE_CANCEL)
	WireBody         = uint8(C.PHP_WORKER_WIRE_BODY)
	WireClientGone   = uint8(C.PHP_WORKER_WIRE_CLIENT_GONE)
	WireStoreReply   = uint8(C.PHP_WORKER_WIRE_STORE_REPLY)
	WireReply        = uint8(C.PHP_WORKER_WIRE_REPLY)
	WireRespond      = uint8(C.PHP_WORKER_WIRE_RESPOND)
	WireReadBody     = uint8(C.PHP_WORKER_WIRE_READ_BODY)
	WireLog          = uint8(C.PHP_WORKER_WIRE_LOG)
	WireSubmitFailed = uint8(C.PHP_WORKER_WIRE_SUBMIT_FAILED)
	WireCancelled    = uint8(C.PHP_WORKER_WIRE_CANCELLED)
	WireStore        = uint8(C.PHP_WORKER_WIRE_STORE)

	WireHead        = C.PHP_WORKER_WIRE_HEAD
	WireMaxFrame    = C.PHP_WORKER_WIRE_MAX_FRAME
	WireSubmitHead  = C.PHP_WORKER_WIRE_SUBMIT_HEAD
	WireRespondHead = C.PHP_WORKER_WIRE_RESPOND_HEAD
	WireNoSlot      = C.PHP_WORKER_WIRE_NO_SLOT
	WireTakenSlots  = C.PHP_WORKER_WIRE_TAKEN_SLOTS
)

// wireOpen says the process's wire is open: its engine answers over it.
var wireOpen atomic.Bool

// ErrWireEnded is what NextCall returns once the Caddy process is gone or done with
// this process.
var ErrWireEnded = errors.New("the wire to the Caddy process ended")

// Wire is the process's wire to the Caddy process, open.
type Wire struct {
	ready *os.File // the core's eventfd for calls, duplicated: Go's poller waits on it
}

// OpenWire hands the socket and the taken table (descriptors the core takes, also on
// failure) to the core, which reads the socket from then on. An engine started after it
// answers over it.
func OpenWire(socket, taken int) (*Wire, error) {
	if err := coreError(C.php_worker_wire_open(C.int32_t(socket), C.int32_t(taken))); err != nil {
		return nil, err
	}
	wireOpen.Store(true)
	fd, err := dupCloseOnExec(int(C.php_worker_wire_calls_fd()))
	if err == nil {
		err = syscall.SetNonblock(fd, true)
	}
	if err != nil {
		return nil, err
	}
	return &Wire{ready: os.NewFile(uintptr(fd), "php_worker wire calls")}, nil
}

// NextCall waits for the next control call: its id and JSON. ErrWireEnded once the
// wire ended and none is left.
func (w *Wire) NextCall() (uint64, []byte, error) {
	for {
		var id C.uint64_t
		var out *C.php_worker_bytes_t
		switch C.php_worker_wire_call_next(&id, &out) {
		case 1:
			return uint64(id), takeBytes(out), nil
		case -1:
			return 0, nil, ErrWireEnded
		}
		var count [8]byte
		if _, err := w.ready.Read(count[:]); err != nil {
			return 0, nil, err
		}
	}
}

// Send sends a frame (a reply, a log line) and returns once it left; false when the
// wire is closed or the payload past WireMaxFrame.
func (w *Wire) Send(kind uint8, id uint64, payload []byte) bool {
	var p *C.uint8_t
	if len(payload) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(payload)))
	}
	return bool(C.php_worker_wire_send(C.uint8_t(kind), C.uint64_t(id), p, C.size_t(len(payload))))
}

// SetDebug says whether the Caddy process logs the engine's debug lines.
func (w *Wire) SetDebug(on bool) {
	C.php_worker_wire_set_debug(C.bool(on))
}
