package mcpfront

import "net/http"

// SDKHandler is f's handler without the fast path.
func SDKHandler(f *Front) http.Handler { return f.sdkHandler }

// FastServed is how many requests f's fast path answered.
func FastServed(f *Front) int64 { return f.fastServed.Load() }
