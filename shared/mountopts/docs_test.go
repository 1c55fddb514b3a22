package mountopts

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/testenv"
)

var update = flag.Bool("update", false, "rewrite the table of docs/mount-options.md from the policy")

// TestTheDocsTableIsThePolicy keeps docs/mount-options.md listing exactly the policy's options:
// one row per option, sorted by name, with its aliases, value, verdict and note.
func TestTheDocsTableIsThePolicy(t *testing.T) {
	testenv.DocSection(t, "docs/mount-options.md", "mountopts", docsTable(), *update,
		"cd shared && GOWORK=off go test ./mountopts -run TestTheDocsTableIsThePolicy -update")
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
