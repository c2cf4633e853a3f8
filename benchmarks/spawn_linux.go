package benchmarks

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// sysProcAttr makes the kernel kill the server when the harness dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// Pdeathsig fires when the thread that forked the child exits (Go issue
// 27505), so servers are forked from one goroutine locked to its thread.
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
			runtime.LockOSThread()
			for r := range spawner.reqs {
				r.err <- r.cmd.Start()
			}
		}()
	})
	r := spawnReq{cmd: cmd, err: make(chan error, 1)}
	spawner.reqs <- r
	return <-r.err
}
