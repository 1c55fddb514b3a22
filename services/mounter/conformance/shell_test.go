package conformance

// Shell redirections: the shell opens the file, and its children inherit the descriptor, write
// through it and close it when they exit; only the shell's own close ends the file.

func redirectOfAScriptWithAChild(e *env) {
	e.wantOK(e.sh(`sh -c 'echo a; /bin/echo b; echo c' > f.txt`))
	e.wantObject("f.txt", []byte("a\nb\nc\n"))
	e.wantRead(e.m, "f.txt", []byte("a\nb\nc\n"))
}

func redirectOfALoopOfCats(e *env) {
	e.put("a.txt", []byte("first\n"))
	e.put("b.txt", []byte("second\n"))
	e.wantOK(e.sh(`for f in a.txt b.txt; do cat "$f"; done > all.txt`))
	e.wantObject("all.txt", []byte("first\nsecond\n"))
}

func redirectOfAGroupWithAChild(e *env) {
	e.wantOK(e.sh(`{ echo a; /bin/true; echo b; } > g.txt`))
	e.wantObject("g.txt", []byte("a\nb\n"))
}

func redirectReplacesAnObject(e *env) {
	e.put("f.txt", []byte("old\n"))
	e.wantOK(e.sh(`echo new > f.txt`))
	e.wantObject("f.txt", []byte("new\n"))
}

func appendRedirectIsRefused(e *env) {
	e.put("f.txt", []byte("old\n"))
	e.wantFailure(e.sh(`echo more >> f.txt`), "Operation not permitted")
	e.wantObject("f.txt", []byte("old\n"))
}

func touchAndEmptyRedirectStoreEmptyObjects(e *env) {
	e.wantOK(e.sh(`touch t.txt && : > e.txt`))
	e.eventuallyObject("t.txt", []byte{})
	e.eventuallyObject("e.txt", []byte{})
}

func touchOfAnExistingObjectIsRefused(e *env) {
	e.put("f.txt", []byte("old\n"))
	e.wantFailure(e.sh(`touch f.txt`), "Operation not permitted")
	e.wantObject("f.txt", []byte("old\n"))
}

func mkdirIsLocalUntilAFileIsWritten(e *env) {
	e.wantOK(e.sh(`mkdir d1 && ls -d d1`))
	e.wantKeys("")
	e.wantOK(e.sh(`rmdir d1 && ! ls -d d1 2>/dev/null`))
	e.wantOK(e.sh(`mkdir d2 && echo x > d2/f.txt`))
	e.wantKeys("", "d2/f.txt")
	e.wantObject("d2/f.txt", []byte("x\n"))
}

func rmOfATreeAnotherClientWrote(e *env) {
	for _, key := range []string{"tree/a/1", "tree/a/b/2", "tree/c", "tree/d/e/f/g"} {
		e.put(key, []byte(key))
	}
	e.wantOK(e.sh(`rm -rf tree && ! ls -d tree 2>/dev/null`))
	e.wantKeys("")
}
