// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names php_worker's spans' instrumentation scope.
const tracerName = "github.com/php-worker/php_worker"

// requestTrace is a PHP request's span, under the span of Caddy's tracing directive when
// the site has one: the time it waited for a PHP thread and its run are child spans,
// from the timing the core reports. Without a recording span above, nothing is made.
type requestTrace struct {
	ctx  context.Context
	span trace.Span
	// When the core took the request (zero until then): the "php queue" span's start.
	// Before it, the span's time went to reading the body and waiting for PHP to start.
	queued  time.Time
	thread  int
	wait    time.Duration // how long the core says it waited for a PHP thread
	status  int
	failure string // why the request failed in php_worker (a timeout, a refusal...), or ""
}

// startTrace starts the span of r, and hands PHP its context: the traceparent PHP sees
// (HTTP_TRACEPARENT) is this span's, so an app's own OpenTelemetry SDK continues the
// trace under it. Nil when r is not traced.
func startTrace(r *http.Request, s Script, route Route) *requestTrace {
	parent := trace.SpanFromContext(r.Context())
	if !parent.IsRecording() {
		return nil
	}
	kind := "classic"
	switch {
	case route.OneShot:
		kind = "one-shot worker"
	case route.Pool != nil:
		kind = "worker"
	}
	ctx, span := parent.TracerProvider().Tracer(tracerName).Start(r.Context(), "php "+kind,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String("php_worker.script", s.Filename),
			attribute.String("php_worker.worker", route.Name),
			attribute.String("php_worker.mode", kind),
		))
	sc := span.SpanContext()
	r.Header.Set("Traceparent", "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-"+sc.TraceFlags().String())
	return &requestTrace{ctx: ctx, span: span, thread: -1}
}

// submitted notes when the core took the request: the body was read and PHP was
// running then, and the core counts the request's wait for a thread from there.
func (t *requestTrace) submitted(at time.Time) {
	if t != nil {
		t.queued = at
	}
}

// observe copies what the core told of the request's run; call it before the request
// is released.
func (t *requestTrace) observe(pr *phpRequest) {
	if t == nil {
		return
	}
	pr.mu.Lock()
	t.thread, t.wait, t.status = pr.thread, pr.queued, pr.status
	pr.mu.Unlock()
}

// fail records why php_worker failed the request.
func (t *requestTrace) fail(why string) {
	if t != nil && t.failure == "" {
		t.failure = why
	}
}

// end ends the span: its wait and run as child spans, its status, and err, the error
// the handler returns (a 4xx or 5xx php_worker answered itself), if any.
func (t *requestTrace) end(err error) {
	if t == nil {
		return
	}
	now := time.Now()
	tracer := t.span.TracerProvider().Tracer(tracerName)
	if t.thread >= 0 && !t.queued.IsZero() {
		ran := t.queued.Add(t.wait)
		_, wait := tracer.Start(t.ctx, "php queue", trace.WithTimestamp(t.queued))
		wait.End(trace.WithTimestamp(ran))
		_, run := tracer.Start(t.ctx, "php run", trace.WithTimestamp(ran),
			trace.WithAttributes(attribute.String("php_worker.thread", "php-"+strconv.Itoa(t.thread))))
		run.End(trace.WithTimestamp(now))
		t.span.SetAttributes(attribute.String("php_worker.thread", "php-"+strconv.Itoa(t.thread)),
			attribute.Int64("php_worker.queued_us", t.wait.Microseconds()))
	}
	if t.status != 0 {
		t.span.SetAttributes(attribute.Int("http.response.status_code", t.status))
	}
	switch {
	case t.failure != "":
		t.span.SetStatus(codes.Error, t.failure)
	case err != nil:
		t.span.SetStatus(codes.Error, err.Error())
	case t.status >= 500:
		t.span.SetStatus(codes.Error, "PHP answered "+strconv.Itoa(t.status))
	}
	t.span.End(trace.WithTimestamp(now))
}
