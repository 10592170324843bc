// Package envoygateway_test starts Tollgate exactly as Envoy Gateway's
// rate-limit Deployment starts envoyproxy/ratelimit (testdata/*.yaml, taken
// from Envoy Gateway d32f282): the Deployment's command, args and env, its
// volumes laid out as the kubelet does, Envoy Gateway's certificates, and
// an xDS server built as Envoy Gateway's own pushing the RateLimitConfig its
// translator makes for an HTTPRoute rule. It runs $LIMITER_BIN as
// /bin/ratelimit, or the image $LIMITER_IMAGE with podman (make image-test):
// see package peerpod.
package envoygateway_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/tollgate/tollgate/deploy/internal/kubelet"
	"github.com/tollgate/tollgate/deploy/internal/peerpod"
	"github.com/tollgate/tollgate/deploy/internal/proc"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// TestEnvoyGatewayDeployments: each of Envoy Gateway's rendered rate-limit
// Deployments starts Tollgate as it starts the peer; it becomes ready on
// the probed port and path, every declared port answers, /metrics answers
// where the pod's scrape annotations point, and ShouldRateLimit, over TLS
// as Envoy Gateway's Envoy connects, answers the rules pushed over xDS as
// the peer would: OK up to each descriptor's limit, OVER_LIMIT after,
// counted per value of a distinct descriptor; a second version raises a
// limit with no restart.
func TestEnvoyGatewayDeployments(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			dep := readDeployment(t, f)
			spec := dep.Spec.Template.Spec
			require.Len(t, spec.Containers, 1)
			c := spec.Containers[0]
			require.Equal(t, []string{"/bin/ratelimit"}, c.Command, "Envoy Gateway runs the peer's command")

			certs := newEGCerts(t)
			x := startEGXDS(t, certs)
			pod := kubelet.NewPod(t)
			pod.Secrets["envoy-rate-limit"] = certs.secret()
			pod.Secrets["ratelimit-redis-redisstd"] = map[string]string{"REDIS_ENDPOINT": "redis.redis.svc:6379"}
			cluster := peerpod.Cluster{Services: map[string]string{"envoy-gateway:18001": x.addr}}
			if env(c, "REDIS_TLS") == "true" {
				// backend.redis.tls: a Redis that speaks TLS only with the
				// client certificate of the Secret certificateRef names
				// (mounted at /redis-certs), with the REDIS_AUTH password,
				// its own certificate signed by a CA the image trusts (no
				// REDIS_TLS_CACERT: the system's CAs, as for the peer).
				pod.Secrets["ratelimit-cert"] = certs.redisClientSecret()
				redis := redistest.StartTLS(t, certs.redisServer(t, env(c, "REDIS_AUTH")))
				cluster.Services["redis.redis.svc:6379"] = redis.TLSAddr()
				cluster.SystemCA = certs.caFile(t)
			} else {
				cluster.Services["redis.redis.svc:6379"] = redistest.Start(t).Addr()
			}
			mounts := pod.Mount(t, spec, c)

			x.push(t, "1", egRules(3))
			p := peerpod.Start(t, dep.Spec.Template, pod, mounts, cluster)
			for _, probe := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
				require.NotNil(t, probe)
				require.NotNil(t, probe.HTTPGet)
				p.WaitStatus(t, p.URL(t, probe.HTTPGet.Port.IntVal, probe.HTTPGet.Path), http.StatusOK, nil)
			}
			for _, cp := range c.Ports {
				conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.Ports[cp.ContainerPort]))
				require.NoError(t, err, "container port %s (%d) does not accept connections", cp.Name, cp.ContainerPort)
				conn.Close()
			}
			if a := dep.Spec.Template.Annotations; a["prometheus.io/scrape"] == "true" {
				port, err := strconv.Atoi(a["prometheus.io/port"])
				require.NoError(t, err)
				p.WaitStatus(t, p.URL(t, int32(port), a["prometheus.io/path"]), http.StatusOK, nil)
			}

			rls := rlsClient(t, p.Ports[portNamed(t, c, "grpc")], certs)
			// The rules count per hour: when an hour ends while the test
			// asks, the counts start again, and so does the test, once, in
			// the new hour.
			for attempt := 0; ; attempt++ {
				hour := time.Now().Truncate(time.Hour)
				got := egAnswers(t, x, rls, attempt, p.Process)
				if attempt == 1 || time.Now().Truncate(time.Hour).Equal(hour) {
					assert.Equal(t, egWant, got)
					break
				}
				t.Logf("an hour ended while the test asked: again in the new one")
			}
		})
	}
}

// env is the value c's env gives name, "" when it does not.
func env(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// readDeployment decodes a fixture strictly: an unknown or misspelt field
// fails.
func readDeployment(t *testing.T, file string) *appsv1.Deployment {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	dep := &appsv1.Deployment{}
	require.NoError(t, yaml.UnmarshalStrict(b, dep), file)
	require.Equal(t, "apps/v1", dep.APIVersion)
	require.Equal(t, "Deployment", dep.Kind)
	return dep
}

func portNamed(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("the container declares no port %q", name)
	return 0
}

// The RateLimitConfig Envoy Gateway's translator (d32f282,
// internal/xds/translator/ratelimit.go, BuildRateLimitServiceConfig) makes
// for its quickstart's HTTPRoute "backend" on Gateway "eg", listener
// "http", with a BackendTrafficPolicy of two global rules: x-user-id equal
// to "one" (a HeaderValueMatch: key and value rule-0-match-0) and a
// distinct x-user-id (key rule-1-match-0, one count per value). The domain
// is the listener's name; each rule hangs under the route's descriptor.
const (
	egDomain = "default/eg/http"
	egRoute  = "httproute/default/backend/rule/0/match/0/www_example_com"
)

func egRules(ruleZero uint32) *rlsconfv3.RateLimitConfig {
	unit := rlsconfv3.RateLimitUnit_HOUR
	return &rlsconfv3.RateLimitConfig{Name: egDomain, Domain: egDomain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: egRoute, Value: egRoute,
		Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "rule-0-match-0", Value: "rule-0-match-0", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: ruleZero}},
			{Key: "rule-1-match-0", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: 2}},
		},
	}}}
}

// egAnswers pushes the rules (rule 0 at 3 an hour; its version ACKed),
// asks about each descriptor past its limit, pushes rule 0 at 5 and asks
// again, and returns each answer as "what: code limit". The first attempt's
// first version is pushed before the service starts.
func egAnswers(t *testing.T, x *egXDS, rls rlsv3.RateLimitServiceClient, attempt int, p *proc.Process) []string {
	t.Helper()
	v1, v2 := strconv.Itoa(2*attempt+1), strconv.Itoa(2*attempt+2)
	if attempt > 0 {
		x.push(t, v1, egRules(3))
	}
	x.acked(t, v1, p.Exited(), p.Output)
	var got []string
	answer := func(what string, entries []*ratelimitv3.RateLimitDescriptor_Entry) {
		st := ask(t, rls, entries)
		l := st.GetCurrentLimit()
		got = append(got, fmt.Sprintf("%s: %s %d/%s", what, st.GetCode(), l.GetRequestsPerUnit(), l.GetUnit()))
	}
	for range 4 {
		answer("x-user-id one", egRuleMatch)
	}
	for range 3 {
		answer("alice", egDistinct("alice"))
	}
	answer("bob", egDistinct("bob"))
	x.push(t, v2, egRules(5))
	x.acked(t, v2, p.Exited(), p.Output)
	for range 2 {
		answer("x-user-id one", egRuleMatch)
	}
	return got
}

// egWant is what the peer answers: OK up to each limit, OVER_LIMIT after,
// one count per distinct value; after the second version, rule 0's limit
// is 5 and the peer, which counted the four hits before (over the limit or
// not), answers OK to the fifth and OVER_LIMIT to the sixth.
var egWant = []string{
	"x-user-id one: OK 3/HOUR", "x-user-id one: OK 3/HOUR", "x-user-id one: OK 3/HOUR", "x-user-id one: OVER_LIMIT 3/HOUR",
	"alice: OK 2/HOUR", "alice: OK 2/HOUR", "alice: OVER_LIMIT 2/HOUR",
	"bob: OK 2/HOUR",
	"x-user-id one: OK 5/HOUR", "x-user-id one: OVER_LIMIT 5/HOUR",
}

// What Envoy sends for a request matching rule 0, and for one of user
// under rule 1 (the route's generic key, then the rule's action).
var egRuleMatch = []*ratelimitv3.RateLimitDescriptor_Entry{{Key: egRoute, Value: egRoute}, {Key: "rule-0-match-0", Value: "rule-0-match-0"}}

func egDistinct(user string) []*ratelimitv3.RateLimitDescriptor_Entry {
	return []*ratelimitv3.RateLimitDescriptor_Entry{{Key: egRoute, Value: egRoute}, {Key: "rule-1-match-0", Value: user}}
}

// rlsClient connects to the rate-limit service's gRPC port as Envoy
// Gateway's Envoy does.
func rlsClient(t *testing.T, port int, certs *egCerts) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(credentials.NewTLS(certs.envoyTLS())))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

func ask(t *testing.T, rls rlsv3.RateLimitServiceClient, entries []*ratelimitv3.RateLimitDescriptor_Entry) *rlsv3.RateLimitResponse_DescriptorStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: egDomain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: entries}}})
	require.NoError(t, err)
	require.Len(t, resp.GetStatuses(), 1)
	return resp.GetStatuses()[0]
}
