package waiting_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/waiting"
)

// A request refused by a limit that lets it wait a second takes a waiting
// place, then pauses as the schedule says before it decides again.
func Example() {
	type place struct {
		limit int
		key   string
	}
	places := waiting.NewPlaces[place](1000, 10)
	keys := []place{{0, "user-1"}}
	if !places.Enter(keys) {
		fmt.Println("no waiting place: refused at once")
		return
	}
	defer places.Leave(keys)

	// A rate limit's RetryAfter is exact.
	var s waiting.Schedule
	s.Refused(time.Second, 300*time.Millisecond, driver.AlgorithmGCRA)
	fmt.Println(s.Next(0, 0))
	fmt.Println(s.Next(800*time.Millisecond, 1)) // would pass the second

	// An in-flight limit's is only an upper bound: poll.
	var l waiting.Schedule
	l.Refused(time.Second, 30*time.Second, driver.AlgorithmInFlight)
	var polls []time.Duration
	for tries := range 7 {
		d, _ := l.Next(0, tries)
		polls = append(polls, d)
	}
	fmt.Println(polls)
	fmt.Println(places.Waiting(), "waiting")
	// Output:
	// 300ms true
	// 300ms false
	// [5ms 10ms 20ms 40ms 80ms 100ms 100ms]
	// 1 waiting
}
