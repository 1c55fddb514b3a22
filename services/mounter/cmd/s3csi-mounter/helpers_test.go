package main

import (
	"bytes"
	"io"
	"strings"
	"sync"
)

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

// syncWriter collects a child's output for failure messages.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
