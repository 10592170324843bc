package httpapi

// HashClient exposes hashClient to the external tests.
var HashClient = hashClient
