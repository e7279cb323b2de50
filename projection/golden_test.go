package projection_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/projection"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// goldenView is what a golden file records of a projection.
type goldenView struct {
	Profile         projection.Profile           `json:"profile"`
	Hash            string                       `json:"projection_hash"`
	TokenMethod     string                       `json:"token_method"`
	Tokens          int                          `json:"tokens"`
	Tools           []goldenTool                 `json:"tools"`
	Unrepresentable []projection.Unrepresentable `json:"unrepresentable"`
	OverLimit       []catalog.Identity           `json:"over_limit"`
}

type goldenTool struct {
	Alias    string           `json:"alias"`
	Identity catalog.Identity `json:"identity"`
	Tokens   int              `json:"tokens"`
	JSON     json.RawMessage  `json:"json"`
}

func TestGolden(t *testing.T) {
	listed := fixture(t)
	for _, p := range projection.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			proj, err := projection.Project(listed, p, projection.Options{})
			if err != nil {
				t.Fatal(err)
			}
			v := goldenView{Profile: p, Hash: proj.Hash, TokenMethod: proj.TokenMethod, Tokens: proj.Tokens, Unrepresentable: proj.Unrepresentable, OverLimit: proj.OverLimit}
			for _, tool := range proj.Tools {
				v.Tools = append(v.Tools, goldenTool{Alias: tool.Alias, Identity: tool.Identity, Tokens: tool.Tokens, JSON: tool.JSON})
			}
			got, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", string(p)+".golden.json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./projection -run TestGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the projection; run with -update and review the diff\n%s", path, got)
			}
		})
	}
}
