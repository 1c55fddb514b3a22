package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// Output formats of -o.
const (
	OutputTable = "table"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// ValidateOutput checks an -o value.
func ValidateOutput(o string) error {
	switch o {
	case OutputTable, OutputJSON, OutputYAML:
		return nil
	}
	return fmt.Errorf("-o %q: want table, json or yaml", o)
}

// Printer writes records. Table output is aligned over what was printed before a Flush;
// records printed after it (following) keep those column widths, growing them only when needed.
type Printer interface {
	Print(r Record) error
	Flush() error
}

// NewPrinter returns the printer of format; podView adds the time since the previous record.
func NewPrinter(w io.Writer, format string, podView bool) Printer {
	switch format {
	case OutputJSON:
		return &jsonPrinter{w: w}
	case OutputYAML:
		return &yamlPrinter{w: w}
	}
	headers := []string{"SEQ", "STORED", "TYPE", "NODE", "POD", "DETAILS"}
	if podView {
		headers = []string{"SEQ", "STORED", "+WAIT", "TYPE", "NODE", "POD", "DETAILS"}
	}
	t := NewTable(w, headers...)
	t.podView = podView
	return t
}

// NewTable returns a table of the given columns.
func NewTable(w io.Writer, headers ...string) *Table {
	return &Table{w: w, headers: headers}
}

type jsonPrinter struct{ w io.Writer }

// Print writes one JSON object per line, so a follow can be piped into jq.
func (p *jsonPrinter) Print(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode record %d: %w", r.Seq, err)
	}
	_, err = fmt.Fprintf(p.w, "%s\n", b)
	return err
}

func (p *jsonPrinter) Flush() error { return nil }

type yamlPrinter struct{ w io.Writer }

// Print writes one YAML document per record.
func (p *yamlPrinter) Print(r Record) error {
	b, err := yaml.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode record %d: %w", r.Seq, err)
	}
	_, err = fmt.Fprintf(p.w, "---\n%s", b)
	return err
}

func (p *yamlPrinter) Flush() error { return nil }

// Table prints aligned columns; it holds rows until Flush.
type Table struct {
	w       io.Writer
	headers []string
	podView bool
	widths  []int
	rows    [][]string
	printed bool
}

// Print adds a record's row.
func (t *Table) Print(r Record) error {
	t.Row(t.cells(r)...)
	if t.printed {
		return t.Flush() // following: every record at once, at the widths already set
	}
	return nil
}

// Row adds a row of cells.
func (t *Table) Row(cells ...string) { t.rows = append(t.rows, cells) }

// Flush writes the rows held, with the header the first time.
func (t *Table) Flush() error {
	all := t.rows
	if !t.printed {
		all = append([][]string{t.headers}, t.rows...)
	}
	if t.widths == nil {
		t.widths = make([]int, len(t.headers))
	}
	for _, row := range all {
		for i, c := range row {
			if i < len(t.widths) {
				t.widths[i] = max(t.widths[i], utf8.RuneCountInString(c))
			}
		}
	}
	var b strings.Builder
	for _, row := range all {
		for i, c := range row {
			if i == len(row)-1 {
				b.WriteString(c)
				break
			}
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", t.widths[i]-utf8.RuneCountInString(c)+2))
		}
		b.WriteString("\n")
	}
	t.rows, t.printed = nil, true
	_, err := io.WriteString(t.w, b.String())
	return err
}

func (t *Table) cells(r Record) []string {
	typ, node, pod, details := r.Type, r.Node, r.Pod, r.Summary
	if r.Invalid != "" {
		typ, details = "INVALID", fmt.Sprintf("subject=%s size=%d: %s (skipped)", clean(r.Subject), r.Size, r.Invalid)
	}
	cells := []string{strconv.FormatUint(r.Seq, 10), r.Stored.Format(time.RFC3339)}
	if t.podView {
		wait := ""
		if r.SincePrevious > 0 {
			wait = "+" + r.SincePrevious.Round(time.Millisecond).String()
		}
		cells = append(cells, dash(wait))
	}
	return append(cells, typ, dash(node), dash(pod), details)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
