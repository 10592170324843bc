package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
)

// Two requests per minute per client address, then 429 with Retry-After and
// a problem document. The server here is httptest's; use http.ListenAndServe
// in your program.
func Example() {
	api := limiter.Policy{Name: "api", Algorithm: limiter.SlidingLog, Limit: 2, Window: time.Minute}
	lim, err := httplimit.New(memstore.New(), []limiter.Policy{api})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	srv := httptest.NewServer(lim.Handle(mux)) // http.ListenAndServe(addr, lim.Handle(mux))
	defer srv.Close()

	for range 3 {
		resp, err := http.Get(srv.URL + "/hello")
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.Status, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("Content-Type"))
		if resp.StatusCode == http.StatusOK {
			fmt.Print(string(body))
		}
	}
	// Output:
	// 200 OK "api";q=2;w=60 text/plain; charset=utf-8
	// hello
	// 200 OK "api";q=2;w=60 text/plain; charset=utf-8
	// hello
	// 429 Too Many Requests "api";q=2;w=60 application/problem+json
}

// A server that allows each client address 100 requests a minute. The
// docs/library.md's "Use it in your Go server" is this program, with
// http.ListenAndServe where the example sends one request.
func Example_server() {
	api := limiter.Policy{Name: "api", Algorithm: limiter.SlidingWindow, Limit: 100, Window: time.Minute}
	lim, err := httplimit.New(memstore.New(), []limiter.Policy{api})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	handler := lim.Handle(mux) // log.Fatal(http.ListenAndServe("127.0.0.1:8081", lim.Handle(mux)))

	w := httptest.NewRecorder()
	handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/hello", nil))
	fmt.Print(w.Code, " ", w.Header().Get("RateLimit-Policy"), " ", w.Header().Get("X-RateLimit-Remaining"), " ", w.Body.String())
	// Output:
	// 200 "api";q=100;w=60 99 hello
}

type ctxUser struct{}

// Logged-in users are limited by their id, anonymous requests by address;
// the prefixes keep a user id and an address from sharing a counter. The
// handler reads what the middleware decided.
func ExampleFirstOf() {
	user := func(ctx context.Context) (string, bool) {
		id, ok := ctx.Value(ctxUser{}).(string)
		return id, ok
	}
	api := limiter.Policy{Name: "api", Algorithm: limiter.TokenBucket, Limit: 100, Window: time.Minute}
	lim, err := httplimit.New(memstore.New(), []limiter.Policy{api}, httplimit.WithKey(httplimit.FirstOf(
		httplimit.Prefixed("user:", httplimit.FromContext(user)),
		httplimit.Prefixed("ip:", httplimit.ClientAddr()),
	)))
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handle(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, _ := httplimit.ResultFrom(r.Context())
		fmt.Fprintf(w, "%s: %d left", res.Key, res.Decisions[0].Remaining)
	}))

	for _, id := range []string{"", "42"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil) // from 192.0.2.1
		if id != "" {                                      // what your authentication middleware does
			r = r.WithContext(context.WithValue(r.Context(), ctxUser{}, id))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Body.String())
	}
	// Output:
	// ip:192.0.2.1: 99 left
	// user:42: 99 left
}

// Behind a load balancer at 10.0.0.0/8, the client is the address the
// balancer puts in X-Forwarded-For; a client's own X-Forwarded-For entries,
// to the left of it, are ignored.
func ExampleClientAddr() {
	key := httplimit.ClientAddr(netip.MustParsePrefix("10.0.0.0/8"))

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.1.2.3:4567"                                // the balancer
	r.Header.Set("X-Forwarded-For", "198.51.100.66, 203.0.113.5") // forged, then added by the balancer
	k, _ := key(r)
	fmt.Println(k)

	r.RemoteAddr = "203.0.113.9:4567" // not a trusted proxy: its header is ignored
	k, _ = key(r)
	fmt.Println(k)
	// Output:
	// 203.0.113.5
	// 203.0.113.9
}

// Clients with options: IPv6 grouped by /56 rather than /64, and a local
// reverse proxy on a Unix socket trusted like the balancer. Entries with a
// port are read as their address.
func ExampleNewClients() {
	clients, err := httplimit.NewClients(
		httplimit.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")),
		httplimit.IPv6Prefix(56),
		httplimit.UnixSocketProxy(),
	)
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.1.2.3:4567"
	for _, xff := range []string{"2001:db8:1:2::7", "[2001:db8:1:3::9]:443", "203.0.113.5:5555", "unknown"} {
		r.Header.Set("X-Forwarded-For", xff)
		k, err := clients.Key(r) // a KeyFunc: httplimit.WithKey(clients.Key)
		fmt.Println(k, err)
	}
	// Output:
	// 2001:db8:1::/56 <nil>
	// 2001:db8:1::/56 <nil>
	// 203.0.113.5 <nil>
	//  httplimit: X-Forwarded-For from a trusted proxy holds an entry that is not an address: "unknown"
}
