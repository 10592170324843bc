// Package deploy holds the tests of the files under deploy/ that ship to
// operators: the Helm chart (helm/), the rendered Kubernetes manifests
// (kubernetes/), the Istio example (kubernetes/istio/), and Envoy Gateway's
// own rate-limit Deployments run with Tollgate in the peer's place
// (envoygateway/). It is a module of its own because helm's SDK, the
// Kubernetes and Istio API types and go-control-plane's server are heavy
// dependencies that neither the service nor the library should carry; it
// builds no binary and imports nothing of the service, which it starts as a
// process ($LIMITER_BIN, as make test sets it, or the image $LIMITER_IMAGE
// with podman, as make image-test does).
package deploy
