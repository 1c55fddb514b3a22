// Package guide holds the examples of the operator's guide (docs/operator-guide.md) that a reader
// applies: Blocks finds them in the page, Prepare parses them with their placeholders filled in
// for a test cluster. The e2e suite applies every one of them (integration/e2e, guide_test.go),
// so the guide cannot show a manifest that does not work.
package guide

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Marker starts the first line of every example a reader applies: "# guide: <name>". Only
// fenced blocks whose info string is exactly InfoString carry it; fragments and values files use
// another info string or no marker.
const (
	Marker     = "# guide:"
	InfoString = "yaml"
)

// Block is one example of the guide.
type Block struct {
	// Name is what follows the marker: lowercase letters, digits and '-', unique in the page.
	Name string
	// Line is the line of the opening fence in the page, from 1.
	Line int
	// YAML is the block's text, the marker line included, each line ending in a newline.
	YAML string
}

var blockName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// Blocks returns the examples of markdown in page order: every fenced code block whose info
// string is InfoString and whose first line starts with Marker. A marker on a block of another
// info string (a ```yml typo would leave the example untested), a name that is empty, malformed
// or repeated, and a fence left open are errors, each naming its line.
func Blocks(markdown string) ([]Block, error) {
	var (
		blocks []Block
		errs   []error
		seen   = map[string]int{}
	)
	lines := strings.Split(markdown, "\n")
	for i := 0; i < len(lines); i++ {
		indent, fence, info, ok := openingFence(lines[i])
		if !ok {
			continue
		}
		start := i + 1
		var body []string
		closed := false
		for i++; i < len(lines); i++ {
			if closesFence(lines[i], fence) {
				closed = true
				break
			}
			body = append(body, dedent(lines[i], indent))
		}
		if !closed {
			errs = append(errs, fmt.Errorf("line %d: the code block is never closed", start))
			break
		}
		if len(body) == 0 || !strings.HasPrefix(strings.TrimSpace(body[0]), Marker) {
			continue
		}
		name := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(body[0]), Marker))
		switch {
		case info != InfoString:
			errs = append(errs, fmt.Errorf("line %d: block %q has the info string %q: an example to apply must be ```%s", start, name, info, InfoString))
		case !blockName.MatchString(name):
			errs = append(errs, fmt.Errorf("line %d: %q is not a block name (lowercase letters, digits and '-')", start, name))
		case seen[name] != 0:
			errs = append(errs, fmt.Errorf("line %d: block %q is already the name of the block at line %d", start, name, seen[name]))
		default:
			seen[name] = start
			blocks = append(blocks, Block{Name: name, Line: start, YAML: strings.Join(body, "\n") + "\n"})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("read the guide's examples: %w", err)
	}
	return blocks, nil
}

// openingFence parses a CommonMark fence opening: up to three spaces, then three or more
// backticks or tildes, then the info string.
func openingFence(line string) (indent int, fence, info string, ok bool) {
	trimmed := strings.TrimLeft(line, " ")
	indent = len(line) - len(trimmed)
	if indent > 3 || len(trimmed) < 3 || (trimmed[0] != '`' && trimmed[0] != '~') {
		return 0, "", "", false
	}
	n := len(trimmed) - len(strings.TrimLeft(trimmed, trimmed[:1]))
	if n < 3 {
		return 0, "", "", false
	}
	info = strings.TrimSpace(trimmed[n:])
	if trimmed[0] == '`' && strings.Contains(info, "`") {
		return 0, "", "", false // an inline code span, not a fence
	}
	return indent, trimmed[:n], info, true
}

// closesFence reports whether line closes a block opened by fence: up to three spaces, at least
// as many of the same character, nothing else.
func closesFence(line, fence string) bool {
	trimmed := strings.TrimLeft(line, " ")
	if len(line)-len(trimmed) > 3 {
		return false
	}
	rest := strings.TrimLeft(trimmed, fence[:1])
	return len(trimmed)-len(rest) >= len(fence) && strings.TrimSpace(rest) == ""
}

// dedent removes up to indent leading spaces, as CommonMark does inside an indented fence.
func dedent(line string, indent int) string {
	for range indent {
		if !strings.HasPrefix(line, " ") {
			break
		}
		line = line[1:]
	}
	return line
}
