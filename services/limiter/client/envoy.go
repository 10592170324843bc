package client

import (
	"context"
	"fmt"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// WithDialOptions adds gRPC dial options for NewEnvoy, after its default of
// plaintext transport credentials (grpc.WithTransportCredentials with TLS
// credentials replaces it).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOpts = append(c.dialOpts, opts...) }
}

// Envoy calls the service's Envoy rate-limit API
// (envoy.service.ratelimit.v3.RateLimitService) over one gRPC connection.
type Envoy struct {
	conn *grpc.ClientConn
	rls  rlsv3.RateLimitServiceClient
	cfg  config
}

// NewEnvoy returns a client of the service's gRPC address target
// ("127.0.0.1:8081", or any gRPC target such as "dns:///tollgate:8081").
// It connects on the first call, and reconnects by itself.
func NewEnvoy(target string, opts ...Option) (*Envoy, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, cfg.dialOpts...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("client: envoy: %w", err)
	}
	return &Envoy{conn: conn, rls: rlsv3.NewRateLimitServiceClient(conn), cfg: cfg}, nil
}

// Close closes the connection.
func (e *Envoy) Close() error { return e.conn.Close() }

// Entry is one key/value pair of a descriptor.
type Entry struct{ Key, Value string }

// Descriptor is a list of entries matched against the service's rules, as in
// Envoy's configuration: {{"user", "42"}}, {{"tenant", "acme"}, {"path", "/x"}}.
type Descriptor []Entry

// DescriptorStatus is the service's answer for one descriptor.
type DescriptorStatus struct {
	// Allowed is false when this descriptor's limit is over.
	Allowed bool
	// Limit is the matching rule's requests per Unit ("SECOND" … "YEAR");
	// zero, with an empty Unit, when no rule matched (always allowed).
	Limit int64
	Unit  string
	// Remaining is what the rule still admits in its window, and
	// ResetAfter how long until the window ends.
	Remaining  int64
	ResetAfter time.Duration
}

// EnvoyDecision is the answer to ShouldRateLimit.
type EnvoyDecision struct {
	// Allowed is false when any enforcing limit is over; when the service
	// could not decide it is the failure mode's answer.
	Allowed bool
	// Unavailable is true when the service could not decide.
	Unavailable bool
	// Statuses has one entry per descriptor, in order (empty when
	// Unavailable).
	Statuses []DescriptorStatus
}

// ShouldRateLimit counts hits (0 counts 1, as in Envoy) on each of the
// descriptors in domain and returns the decision. Errors: gRPC status
// Unavailable, DeadlineExceeded, Internal, ResourceExhausted or no answer
// wrap ErrUnavailable and the decision is the failure mode's; any other
// status (InvalidArgument for a bad request) is returned as is, with
// Allowed false.
func (e *Envoy) ShouldRateLimit(ctx context.Context, domain string, hits uint32, descriptors ...Descriptor) (EnvoyDecision, error) {
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: make([]*ratelimitv3.RateLimitDescriptor, len(descriptors))}
	for i, d := range descriptors {
		entries := make([]*ratelimitv3.RateLimitDescriptor_Entry, len(d))
		for j, en := range d {
			entries[j] = &ratelimitv3.RateLimitDescriptor_Entry{Key: en.Key, Value: en.Value}
		}
		req.Descriptors[i] = &ratelimitv3.RateLimitDescriptor{Entries: entries}
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.timeout)
	defer cancel()
	resp, err := e.rls.ShouldRateLimit(ctx, req)
	if err != nil {
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.ResourceExhausted, codes.Unknown, codes.Canceled:
			return EnvoyDecision{Allowed: e.cfg.mode == FailOpen, Unavailable: true}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return EnvoyDecision{}, fmt.Errorf("client: envoy: %w", err)
	}
	out := EnvoyDecision{Allowed: resp.GetOverallCode() == rlsv3.RateLimitResponse_OK}
	for _, s := range resp.GetStatuses() {
		ds := DescriptorStatus{
			Allowed:    s.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT,
			Remaining:  int64(s.GetLimitRemaining()),
			ResetAfter: s.GetDurationUntilReset().AsDuration(),
		}
		if l := s.GetCurrentLimit(); l != nil {
			ds.Limit, ds.Unit = int64(l.GetRequestsPerUnit()), l.GetUnit().String()
		}
		out.Statuses = append(out.Statuses, ds)
	}
	return out, nil
}
