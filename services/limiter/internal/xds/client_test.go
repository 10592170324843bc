package xds

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
)

const typeURL = "type.googleapis.com/test"

// flooder is a management server that sends its versions back to back,
// without waiting for any ACK, and reports each request it receives.
type flooder struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	versions int
	reqs     chan *discoveryv3.DiscoveryRequest
}

func (f *flooder) StreamAggregatedResources(s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	go func() {
		for {
			r, err := s.Recv()
			if err != nil {
				return
			}
			f.reqs <- r
		}
	}()
	for v := 1; v <= f.versions; v++ {
		res, err := anypb.New(&discoveryv3.DiscoveryRequest{})
		if err != nil {
			return err
		}
		res.TypeUrl = typeURL
		if err := s.Send(&discoveryv3.DiscoveryResponse{VersionInfo: fmt.Sprint(v), Nonce: fmt.Sprint(v), TypeUrl: typeURL, Resources: []*anypb.Any{res}}); err != nil {
			return err
		}
	}
	<-s.Context().Done()
	return nil
}

// TestAVersionFloodIsPaced: a server sending 200 versions back to back
// gets one applied, then the client waits (MinApplyInterval, here a step
// the test releases) before it reads the next; each step applies exactly
// one more, and released, the client reaches the last version.
func TestAVersionFloodIsPaced(t *testing.T) {
	const versions = 200
	f := &flooder{versions: versions, reqs: make(chan *discoveryv3.DiscoveryRequest, versions+10)}
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, f)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)

	var applied atomic.Int64
	c := New(ln.Addr().String(), "node", typeURL, nil, func(string, []*anypb.Any) error { applied.Add(1); return nil }, nil)
	paced, release := make(chan int64), make(chan bool)
	var free atomic.Bool
	c.pace = func(ctx context.Context) bool {
		if free.Load() {
			return true
		}
		select {
		case paced <- applied.Load():
		case <-ctx.Done():
			return false
		}
		return <-release
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})

	for step := int64(1); step <= 3; step++ {
		assert.Equal(t, step, <-paced, "versions applied before the client paused")
		release <- true
	}
	assert.Equal(t, int64(4), <-paced)
	free.Store(true)
	release <- true
	for r := range f.reqs {
		if r.GetResponseNonce() == fmt.Sprint(versions) {
			assert.Equal(t, fmt.Sprint(versions), r.GetVersionInfo(), "the last version ACKed")
			break
		}
	}
	assert.Equal(t, int64(versions), applied.Load())
}
