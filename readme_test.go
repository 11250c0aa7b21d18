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

// examples are the files whose code go test compiles and runs against
// real masters: README.md's and docs/'s Go blocks are excerpts of them.
var examples = []string{
	"example_test.go", "mutex/example_test.go", "rwmutex/example_test.go",
	"mutex/fair_example_test.go", "election/example_test.go", "semaphore/example_test.go", "multi/example_test.go",
	"redlocktest/example/nightly_test.go",
}

// programs are complete programs that go test runs as written (their
// Example calls main): a Go block with a package clause must be one of
// them, whole.
var programs = []string{"examples/quickstart/main.go"}

// docs are the Markdown files whose Go blocks and links are checked.
func docs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md"}, files...)
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReadmeCodeIsExamples checks that every Go block of README.md and
// docs/ is an excerpt of an example that go test runs (against real
// masters), or a whole program that it runs, so that the code compiles,
// handles its errors and works.
func TestReadmeCodeIsExamples(t *testing.T) {
	var all strings.Builder
	for _, f := range examples {
		all.WriteString(normalize(read(t, f)))
	}
	whole := map[string]bool{}
	for _, f := range programs {
		whole[normalize(read(t, f))] = true
	}
	goBlock := regexp.MustCompile("(?s)```go\n(.*?)```")
	clause := regexp.MustCompile(`(?m)^package `)
	for _, doc := range docs(t) {
		blocks := goBlock.FindAllStringSubmatch(read(t, doc), -1)
		if doc == "README.md" && len(blocks) == 0 {
			t.Fatal("README.md has no Go blocks")
		}
		for _, b := range blocks {
			if clause.MatchString(b[1]) {
				if !whole[normalize(b[1])] {
					t.Errorf("%s: this program is not one that go test runs (%v):\n%s", doc, programs, b[1])
				}
				continue
			}
			if !strings.Contains("\n"+all.String(), "\n"+normalize(b[1])) {
				t.Errorf("%s: this block is not part of any example:\n%s", doc, b[1])
			}
			// Whole statements, not a fragment that opens a brace it does not close.
			if _, err := parser.ParseFile(token.NewFileSet(), doc, "package p\nfunc _() {\n"+b[1]+"\n}\n", 0); err != nil {
				t.Errorf("%s: this block is not a list of whole Go statements: %v\n%s", doc, err, b[1])
			}
		}
	}
}

// TestReadmeLinks checks that every relative link of README.md and docs/
// names a file or directory that exists, and that every #anchor names a
// heading of its file.
func TestReadmeLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, doc := range docs(t) {
		text := read(t, doc)
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := doc
			if path != "" {
				file = filepath.Join(filepath.Dir(doc), filepath.FromSlash(path))
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: dead link %q", doc, target)
					continue
				}
			}
			if anchor != "" && !hasAnchor(read(t, file), anchor) {
				t.Errorf("%s: link %q: no heading for #%s in %s", doc, target, anchor, file)
			}
		}
	}
}

// hasAnchor reports whether markdown has a heading whose GitHub anchor is
// anchor: lower case, punctuation dropped, spaces as hyphens.
func hasAnchor(markdown, anchor string) bool {
	for line := range strings.SplitSeq(markdown, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#"))) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		if b.String() == anchor {
			return true
		}
	}
	return false
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
