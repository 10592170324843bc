// Package istio_test checks the Istio example (ratelimit.yaml,
// envoyfilter.yaml): every object decodes strictly, the EnvoyFilter's
// patches are valid Envoy configuration pointing at the example's Service
// and rules, and Tollgate started as the Deployment starts it answers the
// ConfigMap's rules, then a new version of the ConfigMap without a restart.
package istio_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	istionetworking "istio.io/api/networking/v1alpha3"
	istioclient "istio.io/client-go/pkg/apis/networking/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/tollgate/tollgate/deploy/internal/kubelet"
	"github.com/tollgate/tollgate/deploy/internal/peerpod"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// example is ratelimit.yaml's objects, decoded strictly.
type example struct {
	rules   *corev1.ConfigMap
	service *corev1.Service
	deploy  *appsv1.Deployment
}

func readExample(t *testing.T) example {
	t.Helper()
	var ex example
	for _, doc := range docs(t, "ratelimit.yaml") {
		var v any
		switch kind(t, doc) {
		case "v1/ConfigMap":
			ex.rules = &corev1.ConfigMap{}
			v = ex.rules
		case "v1/Service":
			ex.service = &corev1.Service{}
			v = ex.service
		case "apps/v1/Deployment":
			ex.deploy = &appsv1.Deployment{}
			v = ex.deploy
		default:
			t.Fatalf("ratelimit.yaml holds a %s, which the test does not know", kind(t, doc))
		}
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), v), doc)
	}
	require.NotNil(t, ex.rules, "no ConfigMap")
	require.NotNil(t, ex.service, "no Service")
	require.NotNil(t, ex.deploy, "no Deployment")
	return ex
}

func docs(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var out []string
	for doc := range strings.SplitSeq(string(b), "\n---\n") {
		out = append(out, strings.TrimSuffix(doc, "\n")+"\n")
	}
	return out
}

func kind(t *testing.T, doc string) string {
	t.Helper()
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
	return meta.APIVersion + "/" + meta.Kind
}

// readEnvoyFilters decodes envoyfilter.yaml: each object into Istio's
// client type (strict for all but the spec, which Istio's own JSON
// decoding reads leniently), the spec again strictly with protojson into
// Istio's API message, and each patch's value into the Envoy type it
// patches, validated with Envoy's own rules (protoc-gen-validate). It
// returns the HTTP filters and virtual hosts patched in.
func readEnvoyFilters(t *testing.T) ([]*hcmv3.HttpFilter, []*routev3.VirtualHost) {
	t.Helper()
	var (
		filters []*hcmv3.HttpFilter
		vhosts  []*routev3.VirtualHost
	)
	for _, doc := range docs(t, "envoyfilter.yaml") {
		require.Equal(t, "networking.istio.io/v1alpha3/EnvoyFilter", kind(t, doc))
		var ef istioclient.EnvoyFilter
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &ef), doc)
		j, err := yaml.YAMLToJSON([]byte(doc))
		require.NoError(t, err)
		var raw struct {
			Spec json.RawMessage `json:"spec"`
		}
		require.NoError(t, json.Unmarshal(j, &raw))
		spec := &istionetworking.EnvoyFilter{}
		require.NoError(t, protojson.Unmarshal(raw.Spec, spec), "%s: spec", ef.Name)
		require.NotEmpty(t, spec.GetWorkloadSelector().GetLabels(), "%s applies to every proxy of the mesh", ef.Name)
		for _, cp := range spec.GetConfigPatches() {
			value, err := protojson.Marshal(cp.GetPatch().GetValue())
			require.NoError(t, err)
			var m interface {
				proto.Message
				ValidateAll() error
			}
			switch cp.GetApplyTo() {
			case istionetworking.EnvoyFilter_HTTP_FILTER:
				f := &hcmv3.HttpFilter{}
				filters, m = append(filters, f), f
			case istionetworking.EnvoyFilter_VIRTUAL_HOST:
				vh := &routev3.VirtualHost{}
				vhosts, m = append(vhosts, vh), vh
			default:
				t.Fatalf("%s patches %s, which the test does not check", ef.Name, cp.GetApplyTo())
			}
			require.NoError(t, protojson.Unmarshal(value, m), "%s: %s patch", ef.Name, cp.GetApplyTo())
			if cp.GetApplyTo() == istionetworking.EnvoyFilter_VIRTUAL_HOST {
				// A MERGE patch carries only the fields it sets; a whole
				// virtual host needs a name and domains.
				require.Equal(t, istionetworking.EnvoyFilter_Patch_MERGE, cp.GetPatch().GetOperation())
				for _, rl := range m.(*routev3.VirtualHost).GetRateLimits() {
					require.NoError(t, rl.ValidateAll())
				}
				continue
			}
			require.NoError(t, m.ValidateAll(), "%s: %s patch", ef.Name, cp.GetApplyTo())
		}
	}
	return filters, vhosts
}

// rulesFile is the ConfigMap's rules as the peer reads them: the domain,
// and each descriptor's key.
type rulesFile struct {
	Domain      string `json:"domain"`
	Descriptors []struct {
		Key string `json:"key"`
	} `json:"descriptors"`
}

// TestIstioExampleFitsTogether: the EnvoyFilter sends what the example
// serves: its filter's domain is the ConfigMap's, its gRPC cluster is the
// Service's gRPC port by Istio's naming, its descriptor key is one the
// rules know; the Service targets the Deployment's ports and pods, the
// ConfigMap is mounted at RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config.
func TestIstioExampleFitsTogether(t *testing.T) {
	ex := readExample(t)
	filters, vhosts := readEnvoyFilters(t)
	var rules rulesFile
	require.NoError(t, yaml.Unmarshal([]byte(ex.rules.Data["config.yaml"]), &rules))
	require.NotEmpty(t, rules.Domain)

	require.Len(t, filters, 1)
	assert.Equal(t, "envoy.filters.http.ratelimit", filters[0].GetName())
	rl := &ratelimitfilterv3.RateLimit{}
	require.NoError(t, filters[0].GetTypedConfig().UnmarshalTo(rl))
	assert.Equal(t, rules.Domain, rl.GetDomain(), "the filter asks under the ConfigMap's domain")
	assert.Equal(t, corev3.ApiVersion_V3, rl.GetRateLimitService().GetTransportApiVersion())
	var grpcPort int32
	for _, p := range ex.service.Spec.Ports {
		if p.Name == "grpc" {
			grpcPort = p.Port
		}
	}
	require.NotZero(t, grpcPort, "the Service has no grpc port")
	host := fmt.Sprintf("%s.%s.svc.cluster.local", ex.service.Name, ex.service.Namespace)
	eg := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc()
	assert.Equal(t, fmt.Sprintf("outbound|%d||%s", grpcPort, host), eg.GetClusterName(), "Istio's cluster of the Service's gRPC port")
	assert.Equal(t, host, eg.GetAuthority())

	keys := map[string]bool{}
	for _, d := range rules.Descriptors {
		keys[d.Key] = true
	}
	require.Len(t, vhosts, 1)
	require.NotEmpty(t, vhosts[0].GetRateLimits())
	for _, r := range vhosts[0].GetRateLimits() {
		for _, a := range r.GetActions() {
			key := a.GetRequestHeaders().GetDescriptorKey()
			assert.True(t, keys[key], "the action sends descriptor key %q, which no rule has", key)
		}
	}

	tmpl := ex.deploy.Spec.Template
	assert.Equal(t, ex.service.Spec.Selector, ex.deploy.Spec.Selector.MatchLabels)
	for k, v := range ex.service.Spec.Selector {
		assert.Equal(t, v, tmpl.Labels[k], "the Service selects the pods by %s", k)
	}
	require.Len(t, tmpl.Spec.Containers, 1)
	c := tmpl.Spec.Containers[0]
	names := map[string]bool{}
	for _, p := range c.Ports {
		names[p.Name] = true
	}
	for _, p := range ex.service.Spec.Ports {
		assert.True(t, names[p.TargetPort.StrVal], "the Service targets port %q, which the container does not declare", p.TargetPort.String())
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	rulesDir := env["RUNTIME_ROOT"] + "/" + env["RUNTIME_SUBDIRECTORY"] + "/config"
	var mounted bool
	for _, vm := range c.VolumeMounts {
		mounted = mounted || vm.MountPath == rulesDir
	}
	assert.True(t, mounted, "the ConfigMap is not mounted at %s, where the peer's variables put the rules", rulesDir)
}

// TestIstioExampleServesTheRules starts Tollgate as the Deployment starts
// it (its command and env, the ConfigMap laid out as the kubelet mounts
// it, Redis as the "redis" Service): the probes answer, ShouldRateLimit
// answers what the ConfigMap says for what the EnvoyFilter sends (PATH,
// per path), and after the kubelet swaps ..data to a new version of the
// ConfigMap the new limits apply, with no signal and no restart.
func TestIstioExampleServesTheRules(t *testing.T) {
	ex := readExample(t)
	var rules rulesFile
	require.NoError(t, yaml.Unmarshal([]byte(ex.rules.Data["config.yaml"]), &rules))

	redis := redistest.Start(t)
	pod := kubelet.NewPod(t)
	pod.ConfigMaps[ex.rules.Name] = ex.rules.Data
	tmpl := ex.deploy.Spec.Template
	c := tmpl.Spec.Containers[0]
	mounts := pod.Mount(t, tmpl.Spec, c)
	p := peerpod.Start(t, tmpl, pod, mounts, peerpod.Cluster{Services: map[string]string{"redis:6379": redis.Addr()}})
	for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		p.WaitStatus(t, p.URL(t, probe.HTTPGet.Port.IntVal, probe.HTTPGet.Path), http.StatusOK, nil)
	}
	for _, cp := range c.Ports {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.Ports[cp.ContainerPort]))
		require.NoError(t, err, "container port %s does not accept connections", cp.Name)
		conn.Close()
	}

	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", p.Ports[8081]), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(path string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: rules.Domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "PATH", Value: path}},
		}}})
		require.NoError(t, err)
		require.Len(t, resp.GetStatuses(), 1)
		st := resp.GetStatuses()[0]
		return fmt.Sprintf("%s %d/%s", st.GetCode(), st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit())
	}

	// The rules count per minute: when a minute ends while the test asks,
	// the counts start again, and so does the test, once, in the new one.
	for attempt := 0; ; attempt++ {
		minute := time.Now().Truncate(time.Minute)
		var got []string
		for range 6 {
			got = append(got, ask("/login"))
		}
		got = append(got, ask(fmt.Sprintf("/other/%d", attempt)))
		if attempt == 1 || time.Now().Truncate(time.Minute).Equal(minute) {
			assert.Equal(t, []string{
				"OK 5/MINUTE", "OK 5/MINUTE", "OK 5/MINUTE", "OK 5/MINUTE", "OK 5/MINUTE", "OVER_LIMIT 5/MINUTE",
				"OK 100/MINUTE",
			}, got, "the ConfigMap's rules: /login 5 a minute, any other path 100")
			break
		}
	}

	// A new version of the ConfigMap, as `kubectl apply` and the kubelet
	// deliver it: ..data swapped to a new timestamped folder.
	v2 := strings.NewReplacer("requests_per_unit: 5\n", "requests_per_unit: 7\n", "requests_per_unit: 100\n", "requests_per_unit: 200\n").
		Replace(ex.rules.Data["config.yaml"])
	require.Equal(t, 2, strings.Count(v2, "requests_per_unit: 7\n")+strings.Count(v2, "requests_per_unit: 200\n"))
	kubelet.Update(t, mounts.Paths["/data/ratelimit/config"], map[string]string{"config.yaml": v2})
	deadline := time.Now().Add(time.Minute) // a hang guard, not a timing assertion
	for i := 0; ; i++ {
		if strings.HasSuffix(ask(fmt.Sprintf("/poll/%d", i)), " 200/MINUTE") {
			break
		}
		require.True(t, time.Now().Before(deadline), "the new ConfigMap did not apply within a minute:\n%s", p.Output())
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	assert.True(t, strings.HasSuffix(ask("/login"), " 7/MINUTE"), "/login's new limit")
}
