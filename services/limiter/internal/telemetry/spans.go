package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/decide"
)

// The spans' names.
const (
	// DecisionSpan is one policy's decision of a request.
	DecisionSpan = "tollgate.decision"
	// StoreSpan prefixes a store call's span: tollgate.store.allow,
	// tollgate.store.peek, tollgate.store.reset, ...
	StoreSpan = "tollgate.store."
)

// The attributes Tollgate's own spans carry.
const (
	attrPolicy    = attribute.Key("tollgate.policy")
	attrAlgorithm = attribute.Key("tollgate.algorithm")
	attrCost      = attribute.Key("tollgate.cost")
	attrShadow    = attribute.Key("tollgate.shadow")
	attrAllowed   = attribute.Key("tollgate.allowed")
	attrRemaining = attribute.Key("tollgate.remaining")
	attrRetry     = attribute.Key("tollgate.retry_after_ms")
	attrKey       = attribute.Key("tollgate.key")
	attrStore     = attribute.Key("tollgate.store")
	attrBatch     = attribute.Key("tollgate.store.batch")
	attrNode      = attribute.Key("tollgate.redis.node")
	attrScript    = attribute.Key("tollgate.redis.script")
	attrRedirects = attribute.Key("tollgate.redis.redirects")
	attrResent    = attribute.Key("tollgate.redis.resent")
	attrBreaker   = attribute.Key("tollgate.redis.breaker")
)

// Decision starts the span of one policy's decision, a child of the
// request's span, when that span is recorded (a request the sampler left
// out costs nothing more). The span names the policy, its algorithm,
// whether it is a shadow and the cost; ended, whether the policy allowed,
// what remains and the wait when refused, or the store's error. The
// client key is on it only with ClientKey. It implements decide.Tracer.
//
// One span per policy evaluated, rather than one per request with an
// event per policy: each policy's store call is a child of its own
// decision, so the trace shows which policy waited on the store and
// which one failed, and the spans stop where the evaluation stopped
// (policies after an enforcing refusal are not charged, nor shown).
func (t *Tracing) Decision(ctx context.Context, c decide.Check) (context.Context, func(decide.Result, error)) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{
		attrPolicy.String(c.Policy.Name), attrAlgorithm.String(string(c.Policy.Algorithm)),
		attrCost.Int64(c.Cost), attrShadow.Bool(c.Policy.Shadow),
	}
	if t.clientKey {
		key := c.Key.Subject
		if c.Key.Scope != "" {
			key += " " + c.Key.Scope
		}
		attrs = append(attrs, attrKey.String(key))
	}
	ctx, span := t.tracer.Start(ctx, DecisionSpan, trace.WithAttributes(attrs...))
	return ctx, func(r decide.Result, err error) {
		if err != nil {
			failed(span, err)
		} else {
			span.SetAttributes(attrAllowed.Bool(!r.Over), attrRemaining.Int64(r.Remaining))
			if r.Over && !r.Final {
				span.SetAttributes(attrRetry.Int64(r.RetryAfter.Milliseconds()))
			}
		}
		span.End()
	}
}

// failed records err on span and marks it failed.
func failed(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// Store returns s with a span per call made within a recorded span (a
// traced request's: pruning and probes make none), named by the call
// (tollgate.store.allow, ...), with the store's kind, its error, and what
// the store tells its limiter.StoreObserver: the SQLite writer's batch, the
// Redis node, script, batch, redirections, resends and breaker state.
// Put it right above the configured store: the span is the store's own
// call, whatever answers the request (a Redis error shows there even when
// on_store_error answers locally).
func (t *Tracing) Store(s limiter.Store) limiter.Store { return &tracedStore{Store: s, t: t} }

type tracedStore struct {
	limiter.Store
	t *Tracing
}

// start starts the span of call op, or returns a nil span when ctx's
// span is not recorded.
func (s *tracedStore) start(ctx context.Context, op string, p *limiter.Policy) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{s.t.store}
	if p != nil {
		attrs = append(attrs, attrPolicy.String(p.Name))
	}
	kind := trace.SpanKindInternal // the memory store
	switch s.t.store.Value.AsString() {
	case "redis":
		attrs, kind = append(attrs, semconv.DBSystemNameRedis), trace.SpanKindClient
	case "sqlite":
		attrs, kind = append(attrs, semconv.DBSystemNameSQLite), trace.SpanKindClient
	}
	ctx, span := s.t.tracer.Start(ctx, StoreSpan+op, trace.WithAttributes(attrs...), trace.WithSpanKind(kind))
	return limiter.WithStoreObserver(ctx, spanObserver{span}), span
}

// end ends span (nil: none) with err.
func end(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		failed(span, err)
	}
	span.End()
}

func (s *tracedStore) Allow(ctx context.Context, p limiter.Policy, r limiter.Request) (limiter.Decision, error) {
	ctx, span := s.start(ctx, "allow", &p)
	d, err := s.Store.Allow(ctx, p, r)
	end(span, err)
	return d, err
}

func (s *tracedStore) Peek(ctx context.Context, p limiter.Policy, k limiter.Key, now time.Time) (limiter.Decision, error) {
	ctx, span := s.start(ctx, "peek", &p)
	d, err := s.Store.Peek(ctx, p, k, now)
	end(span, err)
	return d, err
}

func (s *tracedStore) Reset(ctx context.Context, p limiter.Policy, k limiter.Key) (int64, error) {
	ctx, span := s.start(ctx, "reset", &p)
	n, err := s.Store.Reset(ctx, p, k)
	end(span, err)
	return n, err
}

func (s *tracedStore) ResetSubject(ctx context.Context, p limiter.Policy, subject string) (int64, error) {
	ctx, span := s.start(ctx, "reset_subject", &p)
	n, err := s.Store.ResetSubject(ctx, p, subject)
	end(span, err)
	return n, err
}

func (s *tracedStore) Ping(ctx context.Context) error {
	ctx, span := s.start(ctx, "ping", nil)
	err := s.Store.Ping(ctx)
	end(span, err)
	return err
}

// Capabilities are the store's: tracing changes none.
func (s *tracedStore) Capabilities() limiter.Capabilities { return limiter.CapabilitiesOf(s.Store) }

// Unwrap returns the traced store.
func (s *tracedStore) Unwrap() limiter.Store { return s.Store }

// spanObserver sets what a store tells of its call on the call's span.
type spanObserver struct{ span trace.Span }

func (o spanObserver) ObserveStore(c limiter.StoreCall) {
	attrs := make([]attribute.KeyValue, 0, 6)
	if c.Batch > 0 {
		attrs = append(attrs, attrBatch.Int(c.Batch))
	}
	if c.Breaker != "" { // Redis
		attrs = append(attrs, attrScript.String(c.Script), attrRedirects.Int(c.Redirects), attrResent.Int(c.Resent), attrBreaker.String(c.Breaker))
		if c.Node != "" {
			attrs = append(attrs, attrNode.String(c.Node))
		}
	}
	o.span.SetAttributes(attrs...)
}
