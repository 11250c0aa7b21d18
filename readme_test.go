package redlock_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeCodeIsExamples checks that every Go block of README.md is an
// excerpt of an example that go test runs (against real masters), so that
// the README's code compiles, handles its errors and works.
func TestReadmeCodeIsExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var examples strings.Builder
	for _, f := range []string{"example_test.go", "mutex/example_test.go", "rwmutex/example_test.go"} {
		b, err := os.ReadFile(filepath.FromSlash(f))
		if err != nil {
			t.Fatal(err)
		}
		examples.WriteString(normalize(string(b)))
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go blocks")
	}
	for _, b := range blocks {
		if !strings.Contains("\n"+examples.String(), "\n"+normalize(b[1])) {
			t.Errorf("this README block is not part of any example:\n%s", b[1])
		}
		// Whole statements, not a fragment that opens a brace it does not close.
		if _, err := parser.ParseFile(token.NewFileSet(), "README.md", "package p\nfunc _() {\n"+b[1]+"\n}\n", 0); err != nil {
			t.Errorf("this README block is not a list of whole Go statements: %v\n%s", err, b[1])
		}
	}
}

// normalize drops indentation and blank lines.
func normalize(code string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(code, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
