package actors

import (
	"strings"
	"testing"
)

func TestValidIDIsIDPattern(t *testing.T) {
	cases := []string{"", "a", "A9", "node.abc", "n-1_x.y", ".a", "-a", "_a", "a b", "a/b", "a*", "é", "a\x00",
		strings.Repeat("a", 128), strings.Repeat("a", 129), "a" + strings.Repeat(".", 127), "9", "a.", "a..b"}
	for c := range 256 {
		cases = append(cases, "a"+string(rune(c)), string(rune(c))+"a", string([]byte{'a', byte(c)}))
	}
	for _, s := range cases {
		if got, want := validID(s), idPattern.MatchString(s); got != want {
			t.Errorf("validID(%q) = %v, idPattern says %v", s, got, want)
		}
	}
}
