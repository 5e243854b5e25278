// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"encoding/binary"
	"encoding/json"
	"sync"

	"github.com/php-worker/php_worker/go-module/internal/core"
	"go.uber.org/zap"
)

// A child's requests: their submission, withdrawal and answers as its frames come in,
// and at its death, what became of each it held (the taken table says whether a PHP
// thread took it: answered 502 if so, run elsewhere if not).

// held is a request a child holds.
type held struct {
	s *Submitted
	// packed is the submission as sent: if the child dies before a PHP thread took
	// the request (its slot in the taken table says), another child runs it.
	packed []byte
	slot   uint32
	// reading is true while the Caddy process reads body bytes for it.
	reading bool
	// withdrawn: the child withdrew it (Cancel); its client was answered already.
	withdrawn bool
	// responded: response data of it came, so it runs or ran: a withdraw is refused
	// without asking the child (see respondedTo).
	responded bool
}

// packedPool recycles the kept submissions.
var packedPool = sync.Pool{New: func() any { return new([]byte) }}

func keepPacked(b []byte) {
	if cap(b) <= 64<<10 {
		b = b[:0]
		packedPool.Put(&b)
	}
}

// submit sends a request; false when the child is gone.
func (p *proc) submit(s *Submitted, pool, flags uint32, b *core.RequestBuffer) bool {
	packed := packSubmit((*packedPool.Get().(*[]byte))[:0], pool, flags, b)
	return p.send(s, packed)
}

// send hands a packed submission to the child, which owns it from then on.
func (p *proc) send(s *Submitted, packed []byte) bool {
	handle := s.handle
	p.mu.Lock()
	if p.dead {
		p.mu.Unlock()
		return false
	}
	slot := p.taken.take()
	setSubmitSlot(packed, slot)
	p.inflight[handle] = held{s: s, packed: packed, slot: slot}
	s.p.Store(p)
	p.load.Add(1)
	p.mu.Unlock()
	if p.link.send(kindSubmit, handle, packed) {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if h, ok := p.inflight[handle]; ok {
		delete(p.inflight, handle)
		p.taken.release(h.slot)
		p.load.Add(-1)
		return false
	}
	return true // the child died meanwhile, and its cleanup took the request on
}

// cancel withdraws a request; see core.Request.Cancel.
func (p *proc) cancel(handle uint64) bool {
	ch := make(chan bool, 1)
	p.mu.Lock()
	if h, ok := p.inflight[handle]; p.dead || !ok || h.responded {
		// Answered, or answering: it cannot be withdrawn, and the read loop may be
		// delivering its response now, under the request's lock the caller holds,
		// ahead of any verdict the child would send.
		p.mu.Unlock()
		return false
	}
	p.cancels[handle] = ch
	p.mu.Unlock()
	if !p.link.send(kindCancel, handle, nil) {
		return false
	}
	withdrawn, ok := <-ch
	return ok && withdrawn
}

// clientGone tells the child that a request's client left.
func (p *proc) clientGone(handle uint64) {
	p.link.post(kindClientGone, handle, nil)
}

// readLoop takes the child's frames until it ends, then answers what it held.
func (p *proc) readLoop(r *reader) {
	host := core.CurrentHost()
	var headers []core.Header
	for {
		kind, id, payload, err := r.next()
		if err != nil {
			break
		}
		switch kind {
		case kindRespond:
			var resp core.Response
			resp, headers, err = unpackRespond(payload, headers)
			if err != nil {
				p.c.logger().Error("a PHP process sent a malformed response; ending it", zap.Int("process", p.slot), zap.Error(err))
				p.kill()
				continue
			}
			p.respondedTo(id, resp.Flags&core.ResponseDone != 0 && resp.Flags&core.ResponseRefused != 0 &&
				resp.Refusal == core.RefusedWithdrawn)
			if resp.Flags&core.ResponseDone != 0 && !p.finish(id) {
				continue // already answered (it cannot be, but never twice)
			}
			if !host.Respond(uintptr(id), resp, core.FromChild) && resp.Flags&core.ResponseDone == 0 {
				p.link.post(kindClientGone, id, nil)
			}
		case kindStore:
			// The table answers from memory, at once: in the read loop, in order.
			reply, err := core.RunSharedStore(payload)
			if err != nil || len(reply) > maxFrame {
				reply = nil // the child's operation fails as on an unreachable table
			}
			p.link.post(kindStoreReply, id, reply)
		case kindReadBody:
			if len(payload) >= 4 {
				p.readBody(id, int(binary.LittleEndian.Uint32(payload)))
			}
		case kindLog:
			level, msg, fields, err := unpackLog(payload)
			if err != nil {
				continue
			}
			handle := uintptr(0)
			p.mu.Lock()
			if _, ok := p.inflight[id]; ok {
				handle = uintptr(id)
			}
			p.mu.Unlock()
			log := host.Logger(handle)
			zf := []zap.Field{zap.Int("process", p.slot)}
			if len(fields) > 2 {
				zf = append(zf, core.LogFields(fields)...)
			}
			log.Log(level, msg, zf...)
		case kindSubmitFailed:
			p.respondedTo(id, false) // the refusal answers the client
			if len(payload) >= 4 && p.finish(id) {
				code := core.Code(int32(binary.LittleEndian.Uint32(payload)))
				host.Respond(uintptr(id), core.Response{Flags: core.ResponseDone | core.ResponseRefused,
					Refusal: refusalOf(code), Thread: -1}, core.FromChild)
			}
		case kindCancelled:
			withdrawn := len(payload) > 0 && payload[0] == 1
			p.mu.Lock()
			// Only while its withdraw waits: once the request's DONE came (it can
			// overtake this verdict), the withdraw was answered, and the handle may
			// be another request's already.
			if _, waits := p.cancels[id]; waits && withdrawn {
				if h, ok := p.inflight[id]; ok {
					h.withdrawn = true
					p.inflight[id] = h
				}
			}
			p.mu.Unlock()
			p.answerCancel(id, withdrawn)
		case kindReply:
			var rep reply
			if err := json.Unmarshal(payload, &rep); err != nil {
				rep.Error = err.Error()
			}
			p.mu.Lock()
			ch := p.calls[id]
			delete(p.calls, id)
			p.mu.Unlock()
			if ch != nil {
				ch <- rep
			}
		}
	}
	p.died()
}

// respondedTo notes that response data of handle came, before it is delivered. A
// withdraw waiting for the child's verdict may hold the request's lock, which delivering
// takes, and that verdict comes behind this frame: the frame decides it (a request
// that answers runs, unless its answer is the withdraw's refusal), so it is given
// first. Under the same lock as cancel's check, so a withdraw that comes later is
// refused at once rather than waiting for a verdict the blocked read loop cannot read.
func (p *proc) respondedTo(handle uint64, withdrawn bool) {
	p.mu.Lock()
	if h, ok := p.inflight[handle]; ok {
		h.responded = true
		p.inflight[handle] = h
	}
	ch := p.cancels[handle]
	delete(p.cancels, handle)
	p.mu.Unlock()
	if ch != nil {
		ch <- withdrawn // buffered: never blocks the read loop
	}
}

// answerCancel gives a waiting Cancel of handle its verdict, if one waits.
func (p *proc) answerCancel(handle uint64, withdrawn bool) {
	p.mu.Lock()
	ch := p.cancels[handle]
	delete(p.cancels, handle)
	p.mu.Unlock()
	if ch != nil {
		ch <- withdrawn // buffered: never blocks the read loop
	}
}

// finish ends a request's stay in the child (its DONE); false when it was not there.
func (p *proc) finish(handle uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.inflight[handle]
	if !ok {
		return false
	}
	keepPacked(h.packed)
	p.taken.release(h.slot)
	delete(p.inflight, handle)
	p.load.Add(-1)
	return true
}

// readBody reads body bytes for the child on a goroutine of its own: the client may be
// slow. A request whose child died meanwhile is answered once the read ends, so its
// handle is never reused under the read.
func (p *proc) readBody(handle uint64, n int) {
	p.mu.Lock()
	h, ok := p.inflight[handle]
	if !ok || p.dead {
		p.mu.Unlock()
		return
	}
	h.reading = true
	p.inflight[handle] = h
	p.mu.Unlock()
	go func() {
		host := core.CurrentHost()
		buf := make([]byte, max(0, min(n, 1<<20)))
		got := host.ReadBody(uintptr(handle), buf)
		if got < 0 {
			p.link.send(kindBody, handle, le64(-1))
		} else {
			p.link.send(kindBody, handle, le64(int64(got)), buf[:got])
		}
		p.mu.Lock()
		h, held := p.inflight[handle]
		orphan := held && p.dead
		if held {
			h.reading = false
			p.inflight[handle] = h
		}
		if orphan {
			delete(p.inflight, handle)
		}
		p.mu.Unlock()
		if orphan {
			p.answerLost(handle)
		}
	}()
}

// answerLost answers a request the dead child held: the host writes a 502.
func (p *proc) answerLost(handle uint64) {
	core.CurrentHost().Respond(uintptr(handle), core.Response{Flags: core.ResponseDone | core.ResponseRefused,
		Refusal: core.RefusedProcessDied, Thread: -1}, core.FromChild)
}
