// Package xds subscribes to one resource type of an xDS management server,
// State of the World over the aggregated discovery service (ADS), as
// envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW does: every response
// carries the whole set of resources, which the client applies whole, then
// acknowledges (ACK: the version it now runs) or refuses (NACK: the version
// it keeps, with the error as detail). When the stream or the connection
// fails it reconnects with an exponential backoff and asks again for the
// version it runs.
package xds

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
)

// MaxMessageBytes bounds one response of the management server: 4 MiB, as
// one rules file. A bigger one ends the stream (the client reconnects with
// its backoff, the running rules stay).
const MaxMessageBytes = 4 << 20

// Backoff between two connection attempts: it doubles from MinBackoff up to
// MaxBackoff, each wait drawn at random in its upper half, and starts again
// from MinBackoff once a stream has received a response.
const (
	MinBackoff = 500 * time.Millisecond
	MaxBackoff = 30 * time.Second
)

// MinApplyInterval is the least time between two versions applied: after
// each ACK or NACK the client waits this long before it reads the next
// response, so that a management server sending versions as fast as it can
// costs one apply (and its log lines) a second, not thousands, while HTTP/2
// flow control holds the rest back. A server that waits for each ACK before
// sending its latest version, as go-control-plane's does, is only delayed.
const MinApplyInterval = time.Second

// Apply applies the resources of one response, every one of the client's
// type, whole: nil accepts them (the client ACKs version), an error refuses
// them and leaves what runs unchanged (the client NACKs with the error's
// text as detail).
type Apply func(version string, resources []*anypb.Any) error

// Client is a subscription; create it with New, run it with Run.
type Client struct {
	addr    string
	node    *corev3.Node
	typeURL string
	creds   credentials.TransportCredentials
	apply   Apply
	log     *slog.Logger
	// pace waits MinApplyInterval, or until ctx is done (false).
	pace func(ctx context.Context) bool
}

// New returns a client of the management server at addr (host:port) that
// subscribes to typeURL as nodeID and gives each response to apply. creds
// secures the connection; nil means plaintext. log receives the state
// changes; nil discards.
func New(addr, nodeID, typeURL string, creds credentials.TransportCredentials, apply Apply, log *slog.Logger) *Client {
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{
		addr: addr, node: &corev3.Node{Id: nodeID, UserAgentName: "tollgate"},
		typeURL: typeURL, creds: creds, apply: apply, log: log, pace: wait,
	}
}

// wait waits MinApplyInterval, or until ctx is done (false).
func wait(ctx context.Context) bool {
	t := time.NewTimer(MinApplyInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Run keeps the subscription until ctx is done, reconnecting after each
// failure, and returns nil then. It returns an error only when the client
// cannot be built at all (a malformed address).
func (c *Client) Run(ctx context.Context) error {
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(c.creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes)))
	if err != nil {
		return fmt.Errorf("xds: %w", err)
	}
	defer conn.Close()
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	version := "" // the version applied last, asked for again on reconnection
	wait := MinBackoff
	for {
		got, err := c.stream(ctx, ads, &version)
		if ctx.Err() != nil {
			return nil
		}
		if got {
			wait = MinBackoff
		}
		d := wait/2 + rand.N(wait/2+1)
		c.log.Warn("xDS: the stream to the management server ended; reconnecting", "server", c.addr, "error", err.Error(), "retry_in", d.String())
		wait = min(2*wait, MaxBackoff)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// stream runs one ADS stream until it fails or ctx is done; version is the
// version applied last, updated at each ACK. got reports whether a
// response arrived.
func (c *Client) stream(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient, version *string) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	// The first request names the node and the version already running.
	if err := s.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: c.typeURL, VersionInfo: *version}); err != nil {
		return false, err
	}
	for {
		resp, err := s.Recv()
		if err != nil {
			return got, err
		}
		if !got {
			c.log.Info("xDS: subscribed", "server", c.addr, "node", c.node.GetId(), "type", c.typeURL)
		}
		got = true
		req := &discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: c.typeURL, ResponseNonce: resp.GetNonce()}
		if err := c.check(resp); err != nil {
			req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
			c.log.Error("xDS: version refused (NACK); the running configuration stays", "version", resp.GetVersionInfo(), "running", *version, "error", err.Error())
		} else {
			*version = resp.GetVersionInfo()
			c.log.Info("xDS: version applied (ACK)", "version", *version, "resources", len(resp.GetResources()))
		}
		req.VersionInfo = *version
		if err := s.Send(req); err != nil {
			return got, err
		}
		if !c.pace(ctx) {
			return got, ctx.Err()
		}
	}
}

// check applies resp when every resource is of the client's type.
func (c *Client) check(resp *discoveryv3.DiscoveryResponse) error {
	if resp.GetTypeUrl() != c.typeURL {
		return fmt.Errorf("xds: a response of type %q; subscribed to %q", resp.GetTypeUrl(), c.typeURL)
	}
	for i, r := range resp.GetResources() {
		if r.GetTypeUrl() != c.typeURL {
			return fmt.Errorf("xds: resource %d is of type %q, not %q", i, r.GetTypeUrl(), c.typeURL)
		}
	}
	return c.apply(resp.GetVersionInfo(), resp.GetResources())
}
