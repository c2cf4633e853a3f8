package spawn

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// Pdeathsig fires when the *thread* that forked the child exits, not the
// process (golang/go#27505), and the Go runtime may retire threads. So every
// child is forked from one goroutine locked to its thread for the life of
// the process.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

// Start starts cmd (replacing its SysProcAttr) so that the kernel kills it
// with SIGKILL when this process dies.
func Start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
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
