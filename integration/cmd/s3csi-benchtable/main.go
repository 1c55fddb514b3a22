// Command s3csi-benchtable reads `go test -bench` output on stdin and prints its figures as one
// markdown table, a row per benchmark: `make bench` runs every benchmark and pipes them here.
// Lines that are not benchmark results (logs, PASS, ok) are left out; a FAIL line makes it exit 1
// after the table, so a failed benchmark cannot pass unnoticed.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

func main() {
	failed, err := table(os.Stdin, os.Stdout)
	if err != nil {
		_, _ = fmt.Fprintln(os.Stderr, "s3csi-benchtable:", err)
		os.Exit(2)
	}
	if failed {
		_, _ = fmt.Fprintln(os.Stderr, "s3csi-benchtable: a benchmark failed (see FAIL above)")
		os.Exit(1)
	}
}

// table writes the results read from in as a markdown table to out, and reports whether the
// output held a FAIL line.
func table(in io.Reader, out io.Writer) (failed bool, err error) {
	var rows [][3]string
	pkg := ""
	s := bufio.NewScanner(in)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		switch {
		case strings.HasPrefix(line, "pkg: "):
			pkg = strings.TrimPrefix(line, "pkg: ")
		case strings.HasPrefix(line, "FAIL"), strings.HasPrefix(line, "--- FAIL"):
			failed = true
		case strings.HasPrefix(line, "Benchmark"):
			if name, figures, ok := result(line); ok {
				rows = append(rows, [3]string{pkg, name, figures})
			}
		}
	}
	if err := s.Err(); err != nil {
		return failed, err
	}
	if _, err := fmt.Fprintln(out, "| package | benchmark | figures |\n|---|---|---|"); err != nil {
		return failed, err
	}
	for _, r := range rows {
		if _, err := fmt.Fprintf(out, "| %s | %s | %s |\n", r[0], r[1], r[2]); err != nil {
			return failed, err
		}
	}
	return failed, nil
}

// result parses "BenchmarkName-2  1  123 ns/op  4.5 p50-ms ..." into the name without its
// GOMAXPROCS suffix and "123 ns/op, 4.5 p50-ms, ..."; ok is false for any other line that starts
// with Benchmark (a benchmark's log header, a name printed alone before its result).
func result(line string) (name, figures string, ok bool) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 || !isNumber(f[1]) {
		return "", "", false
	}
	name = f[0]
	if i := strings.LastIndex(name, "-"); i > 0 && isNumber(name[i+1:]) {
		name = name[:i]
	}
	var parts []string
	for i := 2; i+1 < len(f); i += 2 {
		if !isNumber(f[i]) {
			return "", "", false
		}
		if f[i+1] == "ns/op" && f[i] == "0" {
			continue // a benchmark whose figures are its own metrics reports 0 ns/op
		}
		parts = append(parts, f[i]+" "+f[i+1])
	}
	return name, strings.Join(parts, ", "), true
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}
