// Package grafana_test keeps deploy/grafana/tollgate.json and
// deploy/prometheus/alerts.yml true to the service: every PromQL expression
// in them is parsed with Prometheus's own parser, and every metric and label
// it names must be exported by running limiters (memory, SQLite, Redis and
// TLS), so that renaming a metric breaks this test, not the dashboard.
package grafana_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/tollgate/tollgate/deploy/internal/proc"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// external are the names Prometheus itself gives (up, the target's
// labels), which no process exports.
var (
	externalMetrics = []string{"up"}
	externalLabels  = []string{"job", "instance", model.MetricNameLabel}
)

// grafanaVars stands for the dashboard's variables, so that its
// expressions parse.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m")

// expression is one PromQL expression and where it was found.
type expression struct{ where, expr string }

func dashboardExprs(t *testing.T, file string) []expression {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var dash struct {
		SchemaVersion int `json:"schemaVersion"`
		Panels        []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	require.Positive(t, dash.SchemaVersion, "the dashboard states its schemaVersion")
	var out []expression
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			out = append(out, expression{"panel " + p.Title, grafanaVars.Replace(tg.Expr)})
		}
	}
	hasDatasource := false
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	for _, v := range dash.Templating.List {
		if v.Type == "datasource" && v.Query == "prometheus" {
			hasDatasource = true
		}
		q, _ := v.Query.(map[string]any)
		if s, ok := q["query"].(string); ok {
			m := labelValues.FindStringSubmatch(s)
			require.NotNil(t, m, "variable %s: %q is not label_values(SELECTOR, LABEL)", v.Name, s)
			// The label is read off the selector's series: test it as a
			// grouping by that label.
			out = append(out, expression{"variable " + v.Name, fmt.Sprintf("count by (%s) (%s)", m[2], m[1])})
		}
	}
	require.True(t, hasDatasource, "the dashboard has a prometheus datasource variable, so that it imports without editing")
	require.NotEmpty(t, out)
	return out
}

func alertExprs(t *testing.T, file string) []expression {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			} `json:"rules"`
		} `json:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &rules))
	var out []expression
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, expression{"alert " + r.Alert + r.Record, r.Expr})
		}
	}
	require.NotEmpty(t, out)
	return out
}

// exported is what /metrics shows: metric name -> its label names.
type exported map[string]map[string]bool

// scrape reads the text format's sample lines of url into e.
func (e exported) scrape(t *testing.T, c *http.Client, url string) {
	t.Helper()
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sample := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? `)
	label := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := sample.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if e[m[1]] == nil {
			e[m[1]] = map[string]bool{}
		}
		for _, l := range label.FindAllStringSubmatch(m[3], -1) {
			e[m[1]][l[1]] = true
		}
	}
	require.NoError(t, sc.Err())
}

// check returns what expr names that e does not export: metrics, and
// labels of a selector, a grouping or a vector matching.
func (e exported) check(expr string) ([]string, error) {
	node, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var missing []string
	labelsOf := func(n parser.Node) map[string]bool {
		union := map[string]bool{}
		parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				for l := range e[vs.Name] {
					union[l] = true
				}
			}
			return nil
		})
		return union
	}
	need := func(what string, have map[string]bool, names []string) {
		for _, l := range names {
			if !have[l] && !slices.Contains(externalLabels, l) {
				missing = append(missing, fmt.Sprintf("label %q of %s", l, what))
			}
		}
	}
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			if slices.Contains(externalMetrics, n.Name) {
				return nil
			}
			if e[n.Name] == nil {
				missing = append(missing, "metric "+n.Name)
				return nil
			}
			var names []string
			for _, m := range n.LabelMatchers {
				names = append(names, m.Name)
			}
			need(n.Name, e[n.Name], names)
		case *parser.AggregateExpr:
			need("the aggregation "+n.String(), labelsOf(n.Expr), n.Grouping)
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				have := labelsOf(n.LHS)
				for l := range labelsOf(n.RHS) {
					have[l] = true
				}
				need("the matching of "+n.String(), have, append(slices.Clone(n.VectorMatching.MatchingLabels), n.VectorMatching.Include...))
			}
		}
		return nil
	})
	return missing, nil
}

// TestDashboardAndAlertsNameExportedMetrics starts limiters that export
// every family (memory; SQLite; Redis with a near-cached and a local
// fallback policy; TLS on every listener), makes decisions on each, and
// checks every expression of the dashboard and the alert rules against
// their /metrics.
func TestDashboardAndAlertsNameExportedMetrics(t *testing.T) {
	exprs := append(dashboardExprs(t, "tollgate.json"), alertExprs(t, filepath.Join("..", "prometheus", "alerts.yml"))...)
	e := exported{}
	targets, redis := startLimiters(t)
	for _, base := range targets {
		for range 5 { // /ping allows 3 a minute: refusals too
			resp, err := base.client.Get(base.url + "/ping")
			require.NoError(t, err)
			resp.Body.Close()
		}
		e.scrape(t, base.client, base.url+"/metrics")
	}
	// A Redis node's errors have series once one failed: stop Redis and
	// decide (the local fallback answers), then read them.
	redis.Stop()
	rt := targets[redisTarget]
	resp, err := rt.client.Get(rt.url + "/ping")
	require.NoError(t, err)
	resp.Body.Close()
	e.scrape(t, rt.client, rt.url+"/metrics")
	for _, x := range exprs {
		missing, err := e.check(x.expr)
		require.NoError(t, err, "%s: %s", x.where, x.expr)
		assert.Empty(t, missing, "%s: %s\nnames what no running limiter exports", x.where, x.expr)
	}
}

// TestCheckFindsARenamedMetric: the check is not vacuous — a metric
// misspelt by one letter, a label no series has, a grouping by a label the
// aggregated series lack and a bad expression are each reported.
func TestCheckFindsARenamedMetric(t *testing.T) {
	e := exported{"tollgate_decisions_total": {"policy": true, "result": true}}
	for expr, want := range map[string]string{
		`rate(tollgate_decision_total[5m])`:                             "metric tollgate_decision_total",
		`tollgate_decisions_total{polcy="a"}`:                           `label "polcy"`,
		`sum by (store) (rate(tollgate_decisions_total[5m]))`:           `label "store"`,
		`sum by (policy) (rate(tollgate_decisions_total{job="x"}[5m]))`: "",
	} {
		missing, err := e.check(expr)
		require.NoError(t, err)
		if want == "" {
			assert.Empty(t, missing, expr)
		} else {
			require.Len(t, missing, 1, expr)
			assert.Contains(t, missing[0], want)
		}
	}
	_, err := e.check(`sum by (policy (x)`)
	assert.Error(t, err)
}

type target struct {
	url    string
	client *http.Client
}

// redisTarget is the index of the Redis limiter in startLimiters' targets.
const redisTarget = 2

// startLimiters starts one limiter per store (and one serving TLS) and
// returns where each serves /ping and /metrics, and the Redis server of the
// redisTarget one.
func startLimiters(t *testing.T) ([]target, *redistest.Server) {
	t.Helper()
	bin := proc.Bin(t)
	redis := redistest.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "redis.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`policies:
  ping: { algorithm: sliding_window, limit: 3, window: 60s, near_cache: true, on_store_error: local }
`), 0o600))
	certPEM, keyPEM, caPEM := proc.Certificate(t)
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	require.NoError(t, os.WriteFile(cert, certPEM, 0o600))
	require.NoError(t, os.WriteFile(key, keyPEM, 0o600))
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	pool := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	runs := []struct {
		args   []string
		client *http.Client
		scheme string
	}{
		{args: []string{"--store=memory"}},
		{args: []string{"--store=sqlite", "--sqlite-path=" + filepath.Join(dir, "limiter.db")}},
		{args: []string{"--store=redis", "--redis-url=" + redis.URL(), "--config=" + cfg}},
		{args: []string{"--store=memory", "--tls-cert=" + cert, "--tls-key=" + key}, scheme: "https",
			client: &http.Client{Transport: &http.Transport{TLSClientConfig: pool}}},
	}
	var out []target
	for _, r := range runs {
		port := proc.FreePort(t)
		p := proc.Start(t, bin, dir, append(r.args, fmt.Sprintf("--addr=127.0.0.1:%d", port)), []string{"PATH=" + os.Getenv("PATH")})
		scheme, client := "http", &http.Client{Transport: &http.Transport{}}
		if r.scheme != "" {
			scheme, client = r.scheme, r.client
		}
		url := fmt.Sprintf("%s://127.0.0.1:%d", scheme, port)
		p.WaitStatus(t, url+"/healthz", http.StatusOK, client.Transport.(*http.Transport).TLSClientConfig)
		out = append(out, target{url: url, client: client})
	}
	return out, redis
}
