//go:build linux

package spawn_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/valkeytest/spawn"
)

// TestStartDiesWithParent: a child started by Start is killed when the
// process that started it dies. The test starts a copy of its own binary
// (the parent), which starts `sleep 60` (the child) with Start, prints its
// pid and is then killed; the child must be gone soon after.
func TestStartDiesWithParent(t *testing.T) {
	if os.Getenv("SPAWN_PARENT") == "1" {
		child := exec.Command("sleep", "60")
		if err := spawn.Start(child); err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString(strconv.Itoa(child.Process.Pid) + "\n")
		time.Sleep(time.Minute)
		return
	}
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Fatalf("sleep (coreutils) is needed: %v", err)
	}
	parent := exec.Command(os.Args[0], "-test.run", "^TestStartDiesWithParent$")
	parent.Env = append(os.Environ(), "SPAWN_PARENT=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 32)
	n, err := out.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(string(buf[:n-1]))
	if err != nil {
		t.Fatalf("parent printed %q", buf[:n])
	}
	// Alive while /proc has it in a state other than zombie (a zombie is
	// dead, waiting for whoever inherited it to reap it).
	alive := func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
	}
	if !alive() {
		t.Fatal("the child is not running")
	}
	parent.Process.Kill()
	parent.Wait()
	for deadline := time.Now().Add(10 * time.Second); alive(); {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatal("the child outlived its parent by 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
