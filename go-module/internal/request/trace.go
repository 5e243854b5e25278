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
	ctx       context.Context
	span      trace.Span
	submitted time.Time
	thread    int
	queued    time.Duration
	status    int
	failure   string // why the request failed in php_worker (a timeout, a refusal...), or ""
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
	return &requestTrace{ctx: ctx, span: span, submitted: time.Now(), thread: -1}
}

// observe copies what the core told of the request's run; call it before the request
// is released.
func (t *requestTrace) observe(pr *phpRequest) {
	if t == nil {
		return
	}
	pr.mu.Lock()
	t.thread, t.queued, t.status = pr.thread, pr.queued, pr.status
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
	if t.thread >= 0 {
		ran := t.submitted.Add(t.queued)
		_, wait := tracer.Start(t.ctx, "php queue", trace.WithTimestamp(t.submitted))
		wait.End(trace.WithTimestamp(ran))
		_, run := tracer.Start(t.ctx, "php run", trace.WithTimestamp(ran),
			trace.WithAttributes(attribute.String("php_worker.thread", "php-"+strconv.Itoa(t.thread))))
		run.End(trace.WithTimestamp(now))
		t.span.SetAttributes(attribute.String("php_worker.thread", "php-"+strconv.Itoa(t.thread)),
			attribute.Int64("php_worker.queued_us", t.queued.Microseconds()))
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
