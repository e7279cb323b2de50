package mcpfront

import (
	"encoding/json"
	"reflect"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// completeCall is a CallToolResult whose (unexported) resultType is
// "complete": the SDK sets it only on results of tools registered on its
// server and through its own decoder, and the front's results come from a
// middleware. 2026-07-28 requires resultType on every CallToolResult;
// earlier revisions do not define it.
var completeCall = func() mcp.CallToolResult {
	var r mcp.CallToolResult
	if err := json.Unmarshal([]byte(`{"content":[],"resultType":"complete"}`), &r); err != nil {
		panic(err)
	}
	return r
}()

// markComplete gives res the resultType "complete", keeping every
// exported field as it is (copied by reflection, so a field the SDK adds
// is kept too).
func markComplete(res *mcp.CallToolResult) {
	c := completeCall
	dst, src := reflect.ValueOf(&c).Elem(), reflect.ValueOf(res).Elem()
	for i := 0; i < dst.NumField(); i++ {
		if dst.Type().Field(i).IsExported() {
			dst.Field(i).Set(src.Field(i))
		}
	}
	*res = c
}

// needsResultType reports whether a result answered at the protocol
// revision version must carry resultType (2026-07-28 and later).
func needsResultType(version string) bool { return version >= modernRevision }
