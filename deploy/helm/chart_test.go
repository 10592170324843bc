// Package helm_test tests the chart deploy/helm/tollgate with helm's own Go
// SDK: it lints and renders the chart with each example values file,
// decodes every rendered object strictly into the Kubernetes API types, and
// starts bin/limiter exactly as the rendered pod would run it.
package helm_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "tollgate"
	release   = "tollgate"
	namespace = "tollgate"
)

var update = flag.Bool("update", false, "rewrite deploy/kubernetes/tollgate-*.yaml from the chart (make manifests)")

// valueSets are the values every test renders with: the chart's defaults
// (no file) and each examples/*.yaml.
func valueSets(t *testing.T) map[string]map[string]any {
	t.Helper()
	sets := map[string]map[string]any{"defaults": {}}
	files, err := filepath.Glob(filepath.Join(chartDir, "examples", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		sets[strings.TrimSuffix(filepath.Base(f), ".yaml")] = readValues(t, f)
	}
	return sets
}

func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	vals := map[string]any{}
	require.NoError(t, yaml.Unmarshal(b, &vals), file)
	return vals
}

// render renders the chart as `helm template` does, the values checked
// against values.schema.json, and returns the template files' output.
func render(vals map[string]any) (map[string]string, error) {
	ch, err := loadChart()
	if err != nil {
		return nil, err
	}
	top, err := chartutil.ToRenderValuesWithSchemaValidation(ch, vals,
		chartcommon.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true}, nil, false)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, top)
}

// loadChart loads the chart once: helm logs, at each load, that it follows
// files/alerts.yml's link.
var loadChart = sync.OnceValues(func() (*chart.Chart, error) { return loader.Load(chartDir) })

// object is one rendered Kubernetes object, decoded into its API type.
type object struct {
	source string // the template it came from
	kind   string
	name   string
	value  any // *corev1.Service, *appsv1.Deployment, ...
	yaml   string
}

// kinds maps each kind the chart may render to its apiVersion and type.
var kinds = map[string]struct {
	apiVersion string
	new        func() any
}{
	"ConfigMap":               {"v1", func() any { return &corev1.ConfigMap{} }},
	"Service":                 {"v1", func() any { return &corev1.Service{} }},
	"ServiceAccount":          {"v1", func() any { return &corev1.ServiceAccount{} }},
	"StatefulSet":             {"apps/v1", func() any { return &appsv1.StatefulSet{} }},
	"Deployment":              {"apps/v1", func() any { return &appsv1.Deployment{} }},
	"PodDisruptionBudget":     {"policy/v1", func() any { return &policyv1.PodDisruptionBudget{} }},
	"HorizontalPodAutoscaler": {"autoscaling/v2", func() any { return &autoscalingv2.HorizontalPodAutoscaler{} }},
	"ServiceMonitor":          {"monitoring.coreos.com/v1", func() any { return &monitoringv1.ServiceMonitor{} }},
	"PrometheusRule":          {"monitoring.coreos.com/v1", func() any { return &monitoringv1.PrometheusRule{} }},
}

// decode splits the rendered files into objects and decodes each strictly:
// an unknown or misspelt field, a duplicate key or a wrong type fails.
func decode(t *testing.T, files map[string]string) []object {
	t.Helper()
	var objs []object
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue // NOTES.txt, _helpers.tpl
		}
		for doc := range strings.SplitSeq(files[name], "\n---") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			require.NoError(t, yaml.Unmarshal([]byte(doc), &meta), "%s:\n%s", name, doc)
			k, ok := kinds[meta.Kind]
			require.True(t, ok, "%s renders a kind the test does not know: %q", name, meta.Kind)
			require.Equal(t, k.apiVersion, meta.APIVersion, "%s: apiVersion of %s", name, meta.Kind)
			v := k.new()
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), v), "%s: %s %s does not decode strictly:\n%s", name, meta.Kind, meta.Metadata.Name, doc)
			objs = append(objs, object{source: name, kind: meta.Kind, name: meta.Metadata.Name, value: v, yaml: strings.TrimSpace(doc) + "\n"})
		}
	}
	return objs
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func renderObjects(t *testing.T, vals map[string]any) []object {
	t.Helper()
	files, err := render(vals)
	require.NoError(t, err)
	return decode(t, files)
}

func find[T any](objs []object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.value.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// podSpec returns the rendered workload's pod template and its kind.
func podSpec(t *testing.T, objs []object) (corev1.PodTemplateSpec, string) {
	t.Helper()
	sts := find[*appsv1.StatefulSet](objs)
	deps := find[*appsv1.Deployment](objs)
	require.Equal(t, 1, len(sts)+len(deps), "one workload")
	if len(sts) == 1 {
		return sts[0].Spec.Template, "StatefulSet"
	}
	return deps[0].Spec.Template, "Deployment"
}

func TestChartLints(t *testing.T) {
	for name, vals := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			res := lint.RunAll(chartDir, vals, namespace)
			for _, m := range res.Messages {
				assert.Less(t, m.Severity, support.WarningSev, "helm lint: %s", m)
			}
		})
	}
}

func TestChartRendersKubernetesTypes(t *testing.T) {
	for name, vals := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			objs := renderObjects(t, vals)
			tmpl, kind := podSpec(t, objs)
			store, _ := vals["store"].(string)
			if store == "" {
				store = "sqlite"
			}
			if store == "sqlite" {
				require.Equal(t, "StatefulSet", kind, "the SQLite store is one pod with a volume")
				sts := find[*appsv1.StatefulSet](objs)[0]
				require.NotNil(t, sts.Spec.Replicas)
				assert.EqualValues(t, 1, *sts.Spec.Replicas)
				require.Len(t, sts.Spec.VolumeClaimTemplates, 1)
				assert.Empty(t, find[*policyv1.PodDisruptionBudget](objs), "no PodDisruptionBudget for one pod")
				assert.Empty(t, find[*autoscalingv2.HorizontalPodAutoscaler](objs))
			} else {
				require.Equal(t, "Deployment", kind)
				assert.Len(t, find[*policyv1.PodDisruptionBudget](objs), 1)
			}

			spec := tmpl.Spec
			require.NotNil(t, spec.SecurityContext)
			sc := spec.SecurityContext
			assert.True(t, *sc.RunAsNonRoot)
			assert.EqualValues(t, 65532, *sc.RunAsUser, "the image's user")
			require.NotNil(t, sc.SeccompProfile)
			assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type)
			assert.False(t, *spec.AutomountServiceAccountToken, "Tollgate never talks to the Kubernetes API")
			require.Len(t, spec.Containers, 1)
			c := spec.Containers[0]
			csc := c.SecurityContext
			require.NotNil(t, csc)
			assert.True(t, *csc.ReadOnlyRootFilesystem)
			assert.False(t, *csc.AllowPrivilegeEscalation)
			assert.Equal(t, []corev1.Capability{"ALL"}, csc.Capabilities.Drop)
			assert.Empty(t, csc.Capabilities.Add)

			// The checksum annotation is the settings ConfigMap's content.
			assert.Len(t, tmpl.Annotations["checksum/config"], 64)

			// Every Service's target port is a container port.
			portNames := map[string]bool{}
			for _, p := range c.Ports {
				portNames[p.Name] = true
			}
			for _, svc := range find[*corev1.Service](objs) {
				for _, p := range svc.Spec.Ports {
					assert.True(t, portNames[p.TargetPort.StrVal], "Service %s targets port %q, which the container does not declare", svc.Name, p.TargetPort.String())
				}
			}
			for _, sm := range find[*monitoringv1.ServiceMonitor](objs) {
				for _, ep := range sm.Spec.Endpoints {
					assert.Equal(t, "internal", ep.Port, "/metrics is on the internal listener")
					assert.Equal(t, "/metrics", ep.Path)
				}
			}
		})
	}
}

// TestChartSettingsChangeRollsPods: the checksum annotation follows the
// settings, so that `helm upgrade` with new settings restarts the pods.
func TestChartSettingsChangeRollsPods(t *testing.T) {
	a, _ := podSpec(t, renderObjects(t, map[string]any{}))
	b, _ := podSpec(t, renderObjects(t, map[string]any{"config": map[string]any{"log_format": "text"}}))
	c, _ := podSpec(t, renderObjects(t, map[string]any{"replicas": 5, "store": "redis"}))
	d, _ := podSpec(t, renderObjects(t, map[string]any{"replicas": 7, "store": "redis"}))
	assert.NotEqual(t, a.Annotations["checksum/config"], b.Annotations["checksum/config"])
	assert.Equal(t, c.Annotations["checksum/config"], d.Annotations["checksum/config"], "replicas are not settings")
}

// TestChartPrometheusRuleIsAlertsYml: the PrometheusRule is
// deploy/prometheus/alerts.yml, every group and rule, not a copy that can
// drift.
func TestChartPrometheusRuleIsAlertsYml(t *testing.T) {
	objs := renderObjects(t, map[string]any{"prometheusRule": map[string]any{"enabled": true}})
	rules := find[*monitoringv1.PrometheusRule](objs)
	require.Len(t, rules, 1)
	b, err := os.ReadFile(filepath.Join("..", "prometheus", "alerts.yml"))
	require.NoError(t, err)
	var want monitoringv1.PrometheusRuleSpec
	require.NoError(t, yaml.UnmarshalStrict(b, &want))
	require.NotEmpty(t, want.Groups)
	assert.Equal(t, want, rules[0].Spec)
}

// TestChartRefusesBadValues: values.schema.json and the templates refuse
// what cannot work, with a message naming the value.
func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"unknown store", map[string]any{"store": "mongo"}, "store"},
		{"misspelt key", map[string]any{"replica": 3}, "replica"},
		{"zero replicas", map[string]any{"store": "redis", "replicas": 0}, "replicas"},
		{"port out of range", map[string]any{"ports": map[string]any{"http": 70000, "grpc": 8081, "internal": 8082}}, "http"},
		{"autoscaling on sqlite", map[string]any{"autoscaling": map[string]any{"enabled": true}}, "enabled"},
		{"unknown algorithm", map[string]any{"policies": map[string]any{"api": map[string]any{"algorithm": "leaky", "limit": 5, "window": "1s"}}}, "algorithm"},
		{"not a Redis URL", map[string]any{"store": "redis", "redis": map[string]any{"url": "http://redis:6379"}}, "url"},
		{"a listener in config", map[string]any{"config": map[string]any{"addr": "0.0.0.0:9999"}}, "config.addr is set by the chart"},
		{"tracing endpoint without a scheme", map[string]any{"tracing": map[string]any{"enabled": true, "endpoint": "collector:4317"}}, "endpoint"},
		{"extra env without a name", map[string]any{"extraEnv": []any{map[string]any{"value": "grpc"}}}, "name"},
		{"grace shorter than the shutdown", map[string]any{"terminationGracePeriodSeconds": 5}, "terminationGracePeriodSeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(tc.vals)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestRenderedManifests: deploy/kubernetes/tollgate-EXAMPLE.yaml is the
// chart rendered with examples/EXAMPLE.yaml, for kubectl users; `make
// manifests` rewrites them (go test -run TestRenderedManifests -update).
func TestRenderedManifests(t *testing.T) {
	dir := filepath.Join("..", "kubernetes")
	want := map[string]string{}
	for name, vals := range valueSets(t) {
		if name == "defaults" {
			continue
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "# Rendered from deploy/helm/tollgate with examples/%s.yaml (release %q): `make manifests`.\n", name, release)
		b.WriteString("# Do not edit: change the chart or the example and run make manifests.\n")
		for _, o := range renderObjects(t, vals) {
			fmt.Fprintf(&b, "---\n# %s\n%s", o.source, o.yaml)
		}
		want["tollgate-"+name+".yaml"] = b.String()
	}
	if *update {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		old, _ := filepath.Glob(filepath.Join(dir, "tollgate-*.yaml"))
		for _, f := range old {
			require.NoError(t, os.Remove(f))
		}
		for name, content := range want {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
		}
	}
	have, err := filepath.Glob(filepath.Join(dir, "tollgate-*.yaml"))
	require.NoError(t, err)
	var haveNames []string
	for _, f := range have {
		haveNames = append(haveNames, filepath.Base(f))
	}
	wantNames := make([]string, 0, len(want))
	for name := range want {
		wantNames = append(wantNames, name)
	}
	slices.Sort(wantNames)
	require.Equal(t, wantNames, haveNames, "deploy/kubernetes holds other rendered files than the examples: run make manifests")
	for name, content := range want {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		require.Equal(t, content, string(b), "deploy/kubernetes/%s is stale: run make manifests", name)
	}
}
