package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// DocSection keeps the generated part of a docs page, the text between the lines
// <!-- name:begin --> and <!-- name:end --> of page (a path from the repository root), equal to
// want, what the test generates from the code. When update is set it rewrites the section;
// otherwise it fails at the first line that differs, naming fix, the command that rewrites it.
func DocSection(t testing.TB, page, name, want string, update bool, fix string) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, page)
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	beginMark, endMark := "<!-- "+name+":begin -->", "<!-- "+name+":end -->"
	begin, end := strings.Index(text, beginMark), strings.Index(text, endMark)
	if begin < 0 || end < begin {
		t.Fatalf("%s has no %s ... %s section", path, beginMark, endMark)
	}
	got := text[begin+len(beginMark) : end]
	if got == want {
		return
	}
	if update {
		text = text[:begin+len(beginMark)] + want + text[end:]
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil { //nolint:gosec // a docs page
			t.Fatal(err)
		}
		return
	}
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
	line := func(lines []string, i int) string {
		if i < len(lines) {
			return lines[i]
		}
		return "(none)"
	}
	for i := range max(len(gotLines), len(wantLines)) {
		if g, w := line(gotLines, i), line(wantLines, i); g != w {
			t.Fatalf("the %s section of %s differs from the code at its line %d:\n docs: %s\n code: %s\nrun `%s`", name, path, i, g, w, fix)
		}
	}
}
