package conformance

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/testenv"
)

// workloadPath is the PATH the programs run with: the system's, never a tool manager's shims
// under /root that nobody cannot execute.
const workloadPath = "/usr/local/bin:/usr/bin:/bin"

// programTimeout bounds every program: one still running after it hangs in the mount.
const programTimeout = 60 * time.Second

// programs are the host programs the suite runs, with the Debian package that has each.
var programs = map[string]string{
	"sh": "dash", "dd": "coreutils", "cp": "coreutils", "cat": "coreutils", "touch": "coreutils",
	"truncate": "coreutils", "rm": "coreutils", "ln": "coreutils", "chmod": "coreutils", "stat": "coreutils",
	"mkdir": "coreutils", "rmdir": "coreutils", "ls": "coreutils", "echo": "coreutils", "true": "coreutils",
	"tar": "tar", "rsync": "rsync", "awk": "mawk", "python3": "python3",
}

// requirePrograms fails, never skips, when a program is missing, and says how to install it.
func requirePrograms(t *testing.T) {
	t.Helper()
	var missing, packages []string
	for name, pkg := range programs {
		if _, err := lookWorkloadPath(name); err != nil {
			missing = append(missing, name)
			packages = append(packages, pkg)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("programs the conformance suite runs are missing from %s: %s; install them with `make test-deps` "+
			"from the repository root (apt-get install -y %s)", workloadPath, strings.Join(missing, ", "), strings.Join(packages, " "))
	}
}

// lookWorkloadPath finds a program as the workload user finds it.
func lookWorkloadPath(name string) (string, error) {
	for _, dir := range filepath.SplitList(workloadPath) {
		p := filepath.Join(dir, name)
		if info, err := os.Stat(p); err == nil && !info.IsDir() && info.Mode()&0o001 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("find %s in %s: not found", name, workloadPath)
}

// proc is a program running as the workload user, in its own process group.
type proc struct {
	e        *env
	line     string // the command line, for messages
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	stdout   testenv.SyncBuffer
	stderr   testenv.SyncBuffer
	done     chan struct{}
	deadline time.Time
}

// result is how a program ended.
type result struct {
	line           string
	code           int // -1 when killed by a signal
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("`%s` exited %d\nstdout:\n%s\nstderr:\n%s", r.line, r.code, tail(printable(r.stdout), 20), tail(r.stderr, 20))
}

// start runs argv in dir as nobody. The case must finish, kill or await it; a program still
// running when the case ends is killed.
func (e *env) start(dir string, argv ...string) *proc {
	e.t.Helper()
	path, err := lookWorkloadPath(argv[0])
	if err != nil {
		e.t.Fatal(err)
	}
	p := &proc{e: e, line: commandLine(argv), done: make(chan struct{}), deadline: time.Now().Add(programTimeout)}
	p.cmd = exec.Command(path, argv[1:]...) //nolint:gosec // the programs under test
	p.cmd.Args[0] = argv[0]
	p.cmd.Dir = dir
	p.cmd.Env = []string{"PATH=" + workloadPath, "HOME=" + e.scratch, "TMPDIR=" + e.scratch, "LC_ALL=C"}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true, // the whole group is killed, children of a shell included
		Credential: &syscall.Credential{Uid: workloadUID, Gid: workloadUID},
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	// A child left holding the output pipes must not hold Wait.
	p.cmd.WaitDelay = time.Second
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		e.t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", p.line, err)
	}
	go func() {
		_ = p.cmd.Wait() // the exit code is read from ProcessState
		close(p.done)
	}()
	e.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.killGroup()
		}
	})
	return p
}

// commandLine shows argv in messages, an inline script (python3 -c) by its first line.
func commandLine(argv []string) string {
	shown := make([]string, len(argv))
	for i, arg := range argv {
		if first, _, multiline := strings.Cut(strings.TrimLeft(arg, "\n"), "\n"); multiline {
			arg = "'" + first + " ...'"
		}
		shown[i] = arg
	}
	return strings.Join(shown, " ")
}

// run runs argv in dir to its end.
func (e *env) run(dir string, argv ...string) result {
	e.t.Helper()
	return e.start(dir, argv...).finish()
}

// sh runs a shell script in the root of the case's mount.
func (e *env) sh(script string) result {
	e.t.Helper()
	return e.run(e.m.dir, "sh", "-c", script)
}

// shIn runs a shell script in the root of mount m.
func (e *env) shIn(m *mount, script string) result {
	e.t.Helper()
	return e.run(m.dir, "sh", "-c", script)
}

// await waits until the program printed marker on stdout.
func (p *proc) await(marker string) {
	p.e.t.Helper()
	for !strings.Contains(p.stdout.String(), marker) {
		select {
		case <-p.done:
			p.e.fatalf("%s ended before printing %q:\n%s", p.line, marker, p.result())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(p.deadline) {
			p.hang(fmt.Sprintf("print %q", marker))
		}
	}
}

// send writes a line to the program's stdin.
func (p *proc) send(line string) {
	p.e.t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		p.e.fatalf("write to the stdin of %s: %v\n%s", p.line, err, p.result())
	}
}

// finish closes the program's stdin and waits for its end.
func (p *proc) finish() result {
	p.e.t.Helper()
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(time.Until(p.deadline)):
		p.hang("exit")
	}
	return p.result()
}

// kill sends SIGKILL to the program's process group and waits for its end.
func (p *proc) kill() result {
	p.e.t.Helper()
	p.killGroup()
	select {
	case <-p.done:
	case <-time.After(time.Until(p.deadline)):
		p.hang("end after SIGKILL")
	}
	return p.result()
}

func (p *proc) killGroup() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }

// hang fails the case for a program that did not do what within its time: a program blocked
// in a request the mounter never answers stays blocked after SIGKILL, so the mounters are killed
// too, which aborts the FUSE connection and lets the unmount finish.
func (p *proc) hang(what string) {
	p.e.t.Helper()
	p.killGroup()
	how := "killed its process group"
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.e.killMounters()
		how = "it stayed blocked in the mount after SIGKILL, so the mounters were killed to free it"
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			how += ", and it is still blocked"
		}
	}
	p.e.fatalf("HANG: %s did not %s within %s; %s.\nstdout:\n%s\nstderr:\n%s", p.line, what, programTimeout, how,
		tail(printable(p.stdout.String()), 20), tail(p.stderr.String(), 20))
}

func (p *proc) result() result {
	r := result{line: p.line, code: -1, stdout: p.stdout.String(), stderr: p.stderr.String()}
	select {
	case <-p.done:
		r.code = p.cmd.ProcessState.ExitCode()
	default:
	}
	return r
}

// wantOK fails the case unless the program exited 0.
func (e *env) wantOK(r result) {
	e.t.Helper()
	if r.code != 0 {
		e.fatalf("want exit 0: %s", r)
	}
}

// wantFailure fails the case unless the program failed and said why in its stderr.
func (e *env) wantFailure(r result, why string) {
	e.t.Helper()
	if r.code == 0 || !strings.Contains(r.stderr, why) {
		e.fatalf("want a failure with %q: %s", why, r)
	}
}

// wantRead fails the case unless cat, as the workload user, reads want at rel in mount m.
func (e *env) wantRead(m *mount, rel string, want []byte) {
	e.t.Helper()
	r := e.run(m.dir, "cat", rel)
	e.wantOK(r)
	if r.stdout != string(want) {
		e.fatalf("cat %s through the mount read %s; want %s", rel, describe([]byte(r.stdout)), difference([]byte(r.stdout), want))
	}
}

// printable keeps binary output out of failure messages.
func printable(s string) string {
	if len(s) > 4096 || strings.ContainsRune(s, 0) {
		return fmt.Sprintf("(%d bytes)", len(s))
	}
	return s
}
