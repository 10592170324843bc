// Package deploy holds the tests of the files under deploy/ that ship to
// operators: the Helm chart (helm/), the rendered Kubernetes manifests
// (kubernetes/). It is a module of its own because helm's SDK and the
// Kubernetes API types are heavy dependencies that neither the service nor
// the library should carry; it builds no binary and imports nothing of the
// service, which it starts as a process ($LIMITER_BIN, as make test sets it).
package deploy
