package projection_test

import (
	"encoding/json"
	"fmt"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/projection"
)

func ExampleProject() {
	tool, err := catalog.Normalize("notion", catalog.Definition{
		Name: "search", Description: "Search pages.", Capability: "notion.search", Requirement: "notion/search",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"integer","minimum":1}},"required":["query"]}`),
	}, catalog.Limits{})
	if err != nil {
		panic(err)
	}
	listed := []projection.Listed{{Alias: "notion_search", Tool: tool}}

	p, _ := projection.Project(listed, projection.OpenAI, projection.Options{})
	fmt.Println(string(p.Listing))
	fmt.Println(p.Tokens, p.TokenMethod)

	// Strict mode needs every property required: limit is optional, so
	// the tool is reported, not weakened.
	s, _ := projection.Project(listed, projection.OpenAIStrict, projection.Options{})
	fmt.Println(len(s.Tools), s.Unrepresentable[0].Reasons)

	id, _ := p.Lookup("notion_search")
	fmt.Println(id)
	// Output:
	// [{"function":{"description":"Search pages.","name":"notion_search","parameters":{"properties":{"limit":{"minimum":1,"type":"integer"},"query":{"type":"string"}},"required":["query"],"type":"object"}},"type":"function"}]
	// 50 o200k_base
	// 0 [{required /properties/limit optional property under strict}]
	// notion/search
}
