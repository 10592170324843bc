package client_test

import (
	"context"
	"log"
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/services/limiter/client"
)

// Rate-limit an endpoint of another service with Tollgate's "api" policy,
// keyed by the caller's user id, letting requests through if Tollgate is down.
func ExampleClient_Check() {
	tollgate, err := client.New("http://127.0.0.1:8080", client.WithTimeout(200*time.Millisecond), client.WithFailureMode(client.FailOpen))
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("/orders", func(w http.ResponseWriter, r *http.Request) {
		d, err := tollgate.Check(r.Context(), "api", r.Header.Get("X-User-Id"), 1)
		if err != nil {
			log.Printf("tollgate: %v", err) // d.Allowed is the failure mode's answer
		}
		if !d.Allowed {
			w.Header().Set("Retry-After", strconv.Itoa(int((d.RetryAfter+time.Second-1)/time.Second)))
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		// serve the order
	})
}

// Ask as Envoy would, over gRPC.
func ExampleEnvoy_ShouldRateLimit() {
	envoy, err := client.NewEnvoy("127.0.0.1:8081")
	if err != nil {
		log.Fatal(err)
	}
	defer envoy.Close()
	d, err := envoy.ShouldRateLimit(context.Background(), "shop", 1, client.Descriptor{{Key: "user", Value: "42"}})
	if err != nil {
		log.Print(err)
	}
	log.Println("allowed:", d.Allowed)
}
