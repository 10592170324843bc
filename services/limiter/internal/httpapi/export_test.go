package httpapi

import "github.com/tollgate/tollgate/services/limiter/internal/decide"

// HashClient is the digest the access log shows for a client key.
var HashClient = decide.HashKey
