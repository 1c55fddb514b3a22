package mountopts

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/testenv"
)

var update = flag.Bool("update", false, "rewrite the table of docs/mount-options.md from the policy")

// The table lives between these markers of docs/mount-options.md.
const (
	tableBegin = "<!-- mountopts:begin -->"
	tableEnd   = "<!-- mountopts:end -->"
)

// TestTheDocsTableIsThePolicy keeps docs/mount-options.md listing exactly the policy's options:
// one row per option, sorted by name, with its aliases, value, verdict and note.
func TestTheDocsTableIsThePolicy(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "docs", "mount-options.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	begin, end := strings.Index(text, tableBegin), strings.Index(text, tableEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s has no %s ... %s section for the table", path, tableBegin, tableEnd)
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
			t.Fatalf("the table of %s differs from the policy at its line %d:\n docs: %s\npolicy: %s\n"+
				"run `cd shared && GOWORK=off go test ./mountopts -run TestTheDocsTableIsThePolicy -update`", path, i, g, w)
		}
	}
}

func lineAt(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(none)"
}

// docsTable renders the policy as the markdown table of the docs.
func docsTable() string {
	var b strings.Builder
	b.WriteString("\n| option | value | s3csi | what s3csi does, why it ignores it, or what to use instead |\n|---|---|---|---|\n")
	for _, o := range Known() {
		names := "`" + o.Name + "`"
		for _, a := range o.Aliases {
			names += ", `-" + a + "`"
		}
		value := o.Value
		if value == "" {
			value = "(flag)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", names, value, o.Verdict, o.Note)
	}
	return b.String()
}
