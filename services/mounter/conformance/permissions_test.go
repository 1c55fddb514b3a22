package conformance

// Owners, modes and links: fixed at mount, never changed through the mount.

// modesZero is the mount of modesZeroShutEveryoneOut.
var modesZero = []string{"--dir-mode", "000", "--file-mode", "000"}

func modesZeroShutEveryoneOut(e *env) {
	e.put("f.txt", []byte("secret\n"))
	// Run from the scratch directory: the mount's root cannot be entered.
	e.wantFailure(e.run(e.scratch, "ls", e.m.dir), "Permission denied")
	e.wantFailure(e.run(e.scratch, "cat", e.path("f.txt")), "Permission denied")
	r := e.run(e.scratch, "stat", "-c", "%a", e.m.dir)
	e.wantOK(r)
	if r.stdout != "0\n" {
		e.fatalf("the mount's root has mode %s; want 0 (--dir-mode 000)", r.stdout)
	}
}

func chmodIsRefused(e *env) {
	e.put("f.txt", []byte("x\n"))
	e.wantFailure(e.sh(`chmod 600 f.txt`), "Operation not permitted")
	r := e.sh(`stat -c %a f.txt`)
	e.wantOK(r)
	if r.stdout != "644\n" {
		e.fatalf("f.txt has mode %s; want 644, unchanged", r.stdout)
	}
}

func linksAreRefused(e *env) {
	e.put("f.txt", []byte("x\n"))
	e.wantFailure(e.sh(`ln -s f.txt s.txt`), "Function not implemented")
	e.wantFailure(e.sh(`ln f.txt h.txt`), "Operation not permitted")
	e.wantKeys("", "f.txt")
}
