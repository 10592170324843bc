// Package envoygateway_test starts Tollgate exactly as Envoy Gateway's
// rate-limit Deployment starts envoyproxy/ratelimit (testdata/*.yaml, taken
// from Envoy Gateway d32f282): the Deployment's command, args and env, its
// volumes laid out as the kubelet does, Envoy Gateway's certificates, and
// an xDS server built as Envoy Gateway's own pushing the RateLimitConfig its
// translator makes for an HTTPRoute rule. It runs $LIMITER_BIN as
// /bin/ratelimit, or the image $LIMITER_IMAGE with podman (make image-test).
package envoygateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
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
	"github.com/tollgate/tollgate/deploy/internal/proc"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// ImageEnv names the variable that runs the test against an image with
// podman instead of $LIMITER_BIN: scripts/image-test.sh sets it.
const ImageEnv = "LIMITER_IMAGE"

// refused lists the Deployments Tollgate refuses to start, with the
// variable its error must name: Envoy Gateway's Redis TLS case shows Redis
// a client certificate (REDIS_TLS_CLIENT_CERT), which Tollgate cannot.
var refused = map[string]string{"redis-tls-settings": "REDIS_TLS_CLIENT_CERT"}

// cluster maps the Services the Deployments name to the test's servers, as
// the cluster's DNS would resolve them.
type cluster struct{ xds, redis string }

func (c cluster) resolve(v string) string {
	return strings.NewReplacer("envoy-gateway:18001", c.xds, "redis.redis.svc:6379", c.redis).Replace(v)
}

// TestEnvoyGatewayDeployments: each of Envoy Gateway's rendered rate-limit
// Deployments starts Tollgate as it starts the peer; it becomes ready on
// the probed port and path, every declared port answers, /metrics answers
// where the pod's scrape annotations point, and ShouldRateLimit, over TLS
// as Envoy Gateway's Envoy connects, answers the rules pushed over xDS as
// the peer would: OK up to each descriptor's limit, OVER_LIMIT after,
// counted per value of a distinct descriptor; a second version raises a
// limit with no restart. A Deployment Tollgate cannot serve (refused) must
// stop the start naming the variable.
func TestEnvoyGatewayDeployments(t *testing.T) {
	run := runner(t)
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
			redis := redistest.Start(t)
			pod := kubelet.NewPod(t)
			pod.Secrets["envoy-rate-limit"] = certs.secret()
			pod.Secrets["ratelimit-redis-redisstd"] = map[string]string{"REDIS_ENDPOINT": "redis.redis.svc:6379"}
			pod.Secrets["ratelimit-cert"] = certs.secret()
			mounts := pod.Mount(t, spec, c)
			dns := cluster{xds: x.addr, redis: redis.Addr()}

			if want, ok := refused[name]; ok {
				_, ports := movePorts(t, dep)
				p := run(t, spec, pod, mounts, dns, ports)
				select {
				case <-p.Exited():
				case <-time.After(time.Minute): // a hang guard
					t.Fatalf("started; want a refusal naming %s:\n%s", want, p.Output())
				}
				assert.Contains(t, p.Output(), want)
				return
			}

			x.push(t, "1", egRules(3))
			var (
				p     *proc.Process
				moved map[int32]int
			)
			for attempt := 1; ; attempt++ {
				var env map[string]string
				moved, env = movePorts(t, dep)
				p = run(t, spec, pod, mounts, dns, env)
				ready := c.ReadinessProbe.HTTPGet
				err := p.Poll(fmt.Sprintf("http://127.0.0.1:%d%s", moved[ready.Port.IntVal], ready.Path), http.StatusOK, nil)
				if err == nil {
					break
				}
				if !p.BindFailed() || attempt == 3 {
					t.Fatal(err)
				}
				t.Logf("attempt %d: a port was taken meanwhile; again on other ports", attempt)
			}
			for _, probe := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
				require.NotNil(t, probe)
				require.NotNil(t, probe.HTTPGet)
				p.WaitStatus(t, fmt.Sprintf("http://127.0.0.1:%d%s", moved[probe.HTTPGet.Port.IntVal], probe.HTTPGet.Path), http.StatusOK, nil)
			}
			for _, cp := range c.Ports {
				conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", moved[cp.ContainerPort]))
				require.NoError(t, err, "container port %s (%d) does not accept connections", cp.Name, cp.ContainerPort)
				conn.Close()
			}
			if a := dep.Spec.Template.Annotations; a["prometheus.io/scrape"] == "true" {
				port, err := strconv.Atoi(a["prometheus.io/port"])
				require.NoError(t, err)
				p.WaitStatus(t, fmt.Sprintf("http://127.0.0.1:%d%s", moved[int32(port)], a["prometheus.io/path"]), http.StatusOK, nil)
			}

			rls := rlsClient(t, moved[portNamed(t, c, "grpc")], certs)
			// The rules count per hour: when an hour ends while the test
			// asks, the counts start again, and so does the test, once, in
			// the new hour.
			for attempt := 0; ; attempt++ {
				hour := time.Now().Truncate(time.Hour)
				got := egAnswers(t, x, rls, attempt, p)
				if attempt == 1 || time.Now().Truncate(time.Hour).Equal(hour) {
					assert.Equal(t, egWant, got)
					break
				}
				t.Logf("an hour ended while the test asked: again in the new one")
			}
		})
	}
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

// movePorts picks a free port for each port the peer listens on, set by
// its variables with its defaults (envoyproxy/ratelimit f2fb157,
// src/settings/settings.go: PORT 8080, GRPC_PORT 8081, PROMETHEUS_ADDR
// with USE_PROMETHEUS): a pod has its own network, the test's processes
// share the machine's. It returns the Deployment's port -> the free one,
// and the variables to set; every port the Deployment probes, declares or
// scrapes must be one of them.
func movePorts(t *testing.T, dep *appsv1.Deployment) (map[int32]int, map[string]string) {
	t.Helper()
	c := dep.Spec.Template.Spec.Containers[0]
	get := func(name, def string) string {
		for _, e := range c.Env {
			if e.Name == name && e.Value != "" {
				return e.Value
			}
		}
		return def
	}
	moved, env := map[int32]int{}, map[string]string{}
	move := func(name, value string) {
		host, port, found := strings.Cut(value, ":")
		if !found {
			host, port = "", value
		}
		n, err := strconv.Atoi(port)
		require.NoError(t, err, "%s=%s", name, value)
		free := proc.FreePort(t)
		moved[int32(n)] = free
		if found {
			env[name] = fmt.Sprintf("%s:%d", host, free)
		} else {
			env[name] = strconv.Itoa(free)
		}
	}
	move("PORT", get("PORT", "8080"))
	move("GRPC_PORT", get("GRPC_PORT", "8081"))
	if get("USE_PROMETHEUS", "false") == "true" {
		move("PROMETHEUS_ADDR", get("PROMETHEUS_ADDR", ":9090"))
	}
	used := map[string]int32{}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		if p != nil && p.HTTPGet != nil {
			used["probe "+p.HTTPGet.Path] = p.HTTPGet.Port.IntVal
		}
	}
	for _, cp := range c.Ports {
		used["container port "+cp.Name] = cp.ContainerPort
	}
	if a := dep.Spec.Template.Annotations["prometheus.io/port"]; a != "" {
		n, err := strconv.Atoi(a)
		require.NoError(t, err)
		used["scrape annotation"] = int32(n)
	}
	for what, port := range used {
		require.Contains(t, moved, port, "%s uses port %d, on which the peer's PORT, GRPC_PORT and PROMETHEUS_ADDR open nothing", what, port)
	}
	return moved, env
}

// start runs the container of spec in pod with its env (resolved, the cluster's
// Services mapped by dns, and ports replacing the peer's port variables)
// and returns the process.
type start func(t *testing.T, spec corev1.PodSpec, pod *kubelet.Pod, m kubelet.Mounts, dns cluster, ports map[string]string) *proc.Process

// podEnv is c's env as the kubelet sets it, the Services resolved by dns,
// ports set over it; paths maps each value (the binary sees host paths,
// the image its own).
func podEnv(t *testing.T, c corev1.Container, pod *kubelet.Pod, dns cluster, ports map[string]string, paths func(string) string) []string {
	t.Helper()
	var env []string
	for _, e := range c.Env {
		if _, ok := ports[e.Name]; !ok {
			env = append(env, e.Name+"="+paths(dns.resolve(pod.Resolve(t, e, c))))
		}
	}
	for k, v := range ports {
		env = append(env, k+"="+v)
	}
	return env
}

// runner returns how the test starts a container: the image with podman
// when $LIMITER_IMAGE is set, else $LIMITER_BIN linked as the command.
func runner(t *testing.T) start {
	t.Helper()
	if image := os.Getenv(ImageEnv); image != "" {
		return func(t *testing.T, spec corev1.PodSpec, pod *kubelet.Pod, m kubelet.Mounts, dns cluster, ports map[string]string) *proc.Process {
			return runImage(t, image, spec, pod, m, dns, ports)
		}
	}
	bin := proc.Bin(t)
	return func(t *testing.T, spec corev1.PodSpec, pod *kubelet.Pod, m kubelet.Mounts, dns cluster, ports map[string]string) *proc.Process {
		t.Helper()
		c := spec.Containers[0]
		// The command, /bin/ratelimit, is the binary under that name.
		binDir := filepath.Join(pod.Root, "bin")
		require.NoError(t, os.MkdirAll(binDir, 0o755))
		cmd := filepath.Join(binDir, filepath.Base(c.Command[0]))
		if _, err := os.Lstat(cmd); os.IsNotExist(err) {
			require.NoError(t, os.Symlink(bin, cmd))
		}
		m.Paths[filepath.Dir(c.Command[0])] = binDir
		env := kubelet.ImageEnv(t, filepath.Join("..", "..", "Containerfile"), m)
		env = append(env, podEnv(t, c, pod, dns, ports, func(v string) string { return m.Rewrite(t, v) })...)
		args := make([]string, len(c.Args))
		for i, a := range c.Args {
			args[i] = m.Rewrite(t, a)
		}
		return proc.Start(t, m.Rewrite(t, c.Command[0]), m.WorkDir, args, env)
	}
}

// runImage runs image with podman as the kubelet runs spec's container: the command as
// entrypoint, the env, each volume mount (-v), the security context; on
// the host's network (ports moved as for the binary), with the runtime and
// ulimits of scripts/image-test.sh (PODMAN_FLAGS, PODMAN_RUN_FLAGS).
func runImage(t *testing.T, image string, spec corev1.PodSpec, pod *kubelet.Pod, m kubelet.Mounts, dns cluster, ports map[string]string) *proc.Process {
	t.Helper()
	c := spec.Containers[0]
	flags := func(name, def string) []string {
		if v, ok := os.LookupEnv(name); ok {
			return strings.Fields(v)
		}
		return strings.Fields(def)
	}
	name := fmt.Sprintf("tollgate-eg-%d-%d", os.Getpid(), time.Now().UnixNano())
	entrypoint, err := json.Marshal(c.Command)
	require.NoError(t, err)
	args := append(flags("PODMAN_FLAGS", "--runtime runc"), "run", "--rm", "--name", name, "--entrypoint", string(entrypoint))
	args = append(args, flags("PODMAN_RUN_FLAGS", "--network host --ulimit nofile=4096:4096 --ulimit nproc=4096:4096")...)
	for _, e := range podEnv(t, c, pod, dns, ports, func(v string) string { return v }) {
		args = append(args, "-e", e)
	}
	for _, vm := range c.VolumeMounts {
		v := m.Paths[vm.MountPath] + ":" + vm.MountPath
		if vm.ReadOnly {
			v += ":ro"
		}
		args = append(args, "-v", v)
	}
	args = append(args, securityFlags(spec.SecurityContext, c.SecurityContext)...)
	args = append(append(args, image), c.Args...)
	t.Cleanup(func() {
		_ = exec.Command("podman", append(flags("PODMAN_FLAGS", "--runtime runc"), "rm", "-f", "-i", name)...).Run()
	})
	return proc.Start(t, "podman", pod.Root, args, os.Environ())
}

// securityFlags are podman's flags for a container's security context
// over its pod's, as the kubelet applies them.
func securityFlags(pod *corev1.PodSecurityContext, sc *corev1.SecurityContext) []string {
	var out []string
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	user, group := pod.RunAsUser, pod.RunAsGroup
	if sc.RunAsUser != nil {
		user = sc.RunAsUser
	}
	if sc.RunAsGroup != nil {
		group = sc.RunAsGroup
	}
	if user != nil {
		u := strconv.FormatInt(*user, 10)
		if group != nil {
			u += ":" + strconv.FormatInt(*group, 10)
		}
		out = append(out, "--user", u)
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		out = append(out, "--read-only")
	}
	if sc.Capabilities != nil {
		for _, cp := range sc.Capabilities.Drop {
			out = append(out, "--cap-drop", string(cp))
		}
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		out = append(out, "--security-opt", "no-new-privileges")
	}
	if sc.Privileged != nil && *sc.Privileged {
		out = append(out, "--privileged")
	}
	return out
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
