package telemetry

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tollgate/tollgate/services/limiter/internal/config"
)

// The OTLP protocols (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	protocolGRPC         = "grpc"
	protocolHTTPProtobuf = "http/protobuf"
	protocolHTTPJSON     = "http/json"
)

// env is what the OTEL_* variables that Tollgate reads itself say; the
// exporters read their endpoint, headers, TLS, timeout and compression
// themselves, once checked here.
type env struct {
	protocol string
	sampler  sdktrace.Sampler
}

// readEnv reads and checks the OTEL_* variables (peer's over them when
// not nil): the exporter's, the protocol, the sampler. The Go SDK logs a
// value it cannot take and goes on without it; here it is an error that
// names the variable.
func readEnv(peer *config.PeerTracing) (env, error) {
	var e env
	if v := os.Getenv("OTEL_TRACES_EXPORTER"); v != "" && v != "otlp" {
		return e, invalid("OTEL_TRACES_EXPORTER", v, "not otlp, the only exporter of Tollgate's traces (turn them off with --tracing=false)")
	}
	e.protocol = protocolHTTPProtobuf // the specification's default
	for _, name := range []string{otlp + "PROTOCOL", otlp + "TRACES_PROTOCOL"} {
		switch v := os.Getenv(name); v {
		case "":
		case protocolGRPC, protocolHTTPProtobuf, protocolHTTPJSON:
			e.protocol = v
		default:
			return e, invalid(name, v, "not grpc, http/protobuf or http/json")
		}
	}
	if peer != nil {
		e.protocol = peer.Protocol // the endpoint is checked for the protocol used
	}
	for _, c := range exporterChecks {
		for _, name := range []string{otlp + c.suffix, otlp + "TRACES_" + c.suffix} {
			if v := os.Getenv(name); v != "" {
				if err := c.check(strings.TrimSpace(v), e.protocol); err != nil {
					if c.secret {
						v = "(not shown)"
					}
					return e, invalid(name, v, err.Error())
				}
			}
		}
	}
	if err := checkClientPair(); err != nil {
		return e, err
	}
	var err error
	if e.sampler, err = samplerFromEnv(); err != nil {
		return e, err
	}
	if peer != nil {
		e.sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(peer.SamplingRate))
	}
	return e, nil
}

// otlp prefixes the exporter's variables.
const otlp = "OTEL_EXPORTER_OTLP_"

// exporterChecks check the exporter's variables, each read with and
// without TRACES_ after otlp, as the exporters read them.
var exporterChecks = []struct {
	suffix string
	check  func(v, protocol string) error
	secret bool // the value may hold a credential: an error does not quote it
}{
	{"ENDPOINT", checkEndpoint, false},
	{"TIMEOUT", func(v, _ string) error {
		if ms, err := strconv.Atoi(v); err != nil || ms < 0 {
			return errors.New("not a whole number of milliseconds")
		}
		return nil
	}, false},
	{"INSECURE", func(v, _ string) error {
		if !strings.EqualFold(v, "true") && !strings.EqualFold(v, "false") {
			return errors.New("not true or false")
		}
		return nil
	}, false},
	{"COMPRESSION", func(v, _ string) error {
		if v != "gzip" && v != "none" {
			return errors.New("not gzip or none")
		}
		return nil
	}, false},
	{"HEADERS", checkHeaders, true},
	{"CERTIFICATE", func(v, _ string) error {
		pem, err := os.ReadFile(v)
		if err != nil {
			return err
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return errors.New("holds no PEM certificate")
		}
		return nil
	}, false},
}

// checkEndpoint checks an endpoint URL: OTLP/HTTP posts to it, so it
// needs an http or https scheme and a host; OTLP/gRPC also takes host:port.
func checkEndpoint(v, protocol string) error {
	u, err := url.Parse(v)
	if err != nil {
		return errors.New("not a URL")
	}
	if protocol != protocolGRPC && (u.Scheme != "http" && u.Scheme != "https" || u.Host == "") {
		return errors.New("not an http:// or https:// URL with a host")
	}
	return nil
}

// checkHeaders checks a list of name=value pairs, comma-separated, the
// values percent-encoded.
func checkHeaders(v, _ string) error {
	for pair := range strings.SplitSeq(v, ",") {
		name, value, found := strings.Cut(pair, "=")
		if !found || !httpguts.ValidHeaderFieldName(strings.TrimSpace(name)) {
			return errors.New("not a list of name=value pairs")
		}
		if _, err := url.PathUnescape(value); err != nil {
			return errors.New("a value is not percent-encoded")
		}
	}
	return nil
}

// checkClientPair checks the client certificate and its key, which go
// together, with or without TRACES_.
func checkClientPair() error {
	for _, prefix := range []string{otlp, otlp + "TRACES_"} {
		certName, keyName := prefix+"CLIENT_CERTIFICATE", prefix+"CLIENT_KEY"
		cert, key := os.Getenv(certName), os.Getenv(keyName)
		if cert == "" && key == "" {
			continue
		}
		if cert == "" || key == "" {
			return &config.Error{Field: certName + ", " + keyName, Reason: "one is set without the other"}
		}
		if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
			return &config.Error{Field: certName + ", " + keyName, Reason: err.Error()}
		}
	}
	return nil
}

// samplerFromEnv is the sampler OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG name, by the specification's names and default
// (parentbased_always_on), as the Go SDK reads them, but refusing what it
// would log and replace.
func samplerFromEnv() (sdktrace.Sampler, error) {
	const name, argName = "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"
	v, arg := strings.ToLower(strings.TrimSpace(os.Getenv(name))), strings.TrimSpace(os.Getenv(argName))
	ratio := func() (sdktrace.Sampler, error) {
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1), nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(r >= 0 && r <= 1) {
			return nil, invalid(argName, arg, "not a ratio from 0 to 1")
		}
		return sdktrace.TraceIDRatioBased(r), nil
	}
	switch v {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return ratio()
	case "parentbased_traceidratio":
		s, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.ParentBased(s), nil
	}
	return nil, invalid(name, v, "not always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio")
}

// invalid is the error of a variable whose value v cannot be taken.
func invalid(name, v, why string) error {
	return &config.Error{Field: name, Reason: fmt.Sprintf("%q: %s", v, why)}
}
