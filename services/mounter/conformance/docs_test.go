package conformance

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/testenv"
)

var update = flag.Bool("update", false, "rewrite the conformance table of docs/s3csi-mounter.md from the suite")

// The docs table lives between these markers of docs/s3csi-mounter.md.
const (
	tableBegin = "<!-- conformance:begin -->"
	tableEnd   = "<!-- conformance:end -->"
)

// TestTheDocsTableIsTheSuite keeps docs/s3csi-mounter.md listing exactly the suite: one row per
// behavior, in the suite's order, with its test name, words and verdict.
func TestTheDocsTableIsTheSuite(t *testing.T) {
	checkSuite(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "docs", "s3csi-mounter.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	begin, end := strings.Index(text, tableBegin), strings.Index(text, tableEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s has no %s ... %s section for the conformance table", path, tableBegin, tableEnd)
	}
	got, want := text[begin+len(tableBegin):end], docsTable()
	if got == want {
		return
	}
	if *update {
		text = text[:begin+len(tableBegin)] + want + text[end:]
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil { //nolint:gosec // a docs page
			t.Fatal(err)
		}
		return
	}
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(gotLines), len(wantLines)) {
		g, w := lineAt(gotLines, i), lineAt(wantLines, i)
		if g != w {
			t.Fatalf("the conformance table of %s differs from the suite at its line %d:\n docs: %s\nsuite: %s\n"+
				"run `cd services/mounter && GOWORK=off go test ./conformance -run TestTheDocsTableIsTheSuite -update`", path, i, g, w)
		}
	}
}

func lineAt(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(none)"
}

// docsTable renders the suite as the markdown table of the docs.
func docsTable() string {
	var b strings.Builder
	b.WriteString("\n| test (`TestConformance/...`) | behavior | vs mount-s3 |\n|---|---|---|\n")
	for _, c := range suite {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", testName(c.name), cell(c.does), cell(c.verdict))
	}
	return b.String()
}

// testName is the name go test gives the subtest.
func testName(name string) string { return strings.ReplaceAll(name, " ", "_") }

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// checkSuite fails on rows the table cannot show: duplicate names, names go test rewrites
// beyond spaces, verdicts that are not same, stricter: or different:.
func checkSuite(t *testing.T) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range suite {
		if seen[c.name] {
			t.Errorf("two behaviors are named %q", c.name)
		}
		seen[c.name] = true
		if strings.ContainsFunc(c.name, func(r rune) bool { return r < ' ' || r > '~' || r == '/' || r == '|' }) {
			t.Errorf("behavior %q: a name is printable ASCII without / or |", c.name)
		}
		if c.verdict != same && !strings.HasPrefix(c.verdict, "stricter: ") && !strings.HasPrefix(c.verdict, "different: ") {
			t.Errorf("behavior %q: verdict %q is not same, stricter: why or different: why", c.name, c.verdict)
		}
		if c.does == "" || c.run == nil {
			t.Errorf("behavior %q has no description or no test", c.name)
		}
	}
}
