package valkeytest

import (
	"os"
	"strconv"
	"strings"
	"time"
)

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
