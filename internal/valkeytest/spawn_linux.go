package valkeytest

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// sysProcAttr makes the kernel kill the server when its parent dies, so a
// test binary that crashes, times out or is interrupted leaks no servers.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// Pdeathsig fires when the *thread* that forked the child exits, not the
// process (golang/go#27505), and the Go runtime may retire threads. So every
// server is forked from one goroutine locked to its thread for the life of
// the test binary.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

func startCmd(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawner.reqs {
				r.err <- r.cmd.Start()
			}
		}()
	})
	r := spawnReq{cmd: cmd, err: make(chan error, 1)}
	spawner.reqs <- r
	return <-r.err
}

// waitState waits briefly until process pid is in state (such as 'T',
// stopped), as /proc reports it, so that Pause returns once the server is
// actually stopped.
func waitState(pid int, state byte) {
	if pid == 0 {
		return
	}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		// "pid (comm) S ...": the state follows the last ')'.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] == state {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
