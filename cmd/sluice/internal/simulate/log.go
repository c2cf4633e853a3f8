package simulate

import (
	"encoding/json"
	"io"
	"time"
)

// decisionLog writes decisions as JSON lines, the format Record reads:
//
//	{"time":"2027-01-01T00:00:00.99Z","policy":"gcra","key":"client-1","cost":1,"allowed":true}
//
// It is the only writer of that format.
type decisionLog struct {
	w   io.Writer
	buf []byte
}

type decisionLine struct {
	Time    string `json:"time"`
	Policy  string `json:"policy"`
	Key     string `json:"key"`
	Cost    int64  `json:"cost"`
	Allowed bool   `json:"allowed"`
}

func (l *decisionLog) write(t time.Time, policy, key string, cost int64, allowed bool) error {
	b, err := json.Marshal(decisionLine{Time: t.UTC().Format(time.RFC3339Nano), Policy: policy, Key: key, Cost: cost, Allowed: allowed})
	if err != nil {
		return err
	}
	l.buf = append(append(l.buf, b...), '\n')
	if len(l.buf) >= 64<<10 {
		return l.flush()
	}
	return nil
}

func (l *decisionLog) flush() error {
	_, err := l.w.Write(l.buf)
	l.buf = l.buf[:0]
	return err
}
