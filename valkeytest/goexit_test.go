package valkeytest_test

import "runtime"

func runtimeGoexit() { runtime.Goexit() }
