// Package runner is Sluice's compatibility harness's stand-in for
// envoyproxy/ratelimit's in-process runner (upstream's
// src/service_cmd/runner). It is not upstream's code: upstream's
// integration tests call NewRunner, Run, Stop and GetStatsStore, and this
// package answers them by running the `sluice serve` binary (SLUICE_BIN)
// with the test's settings as environment variables, as a deployment
// would, and by reading statistics from its /metrics endpoint through
// upstream's statsd-to-Prometheus mapping (src/stats/prom/default_mapper.yaml,
// the one upstream's USE_PROMETHEUS serves).
//
// A binary that refuses the settings (exits at start) is reported on
// stdout as "SLUICE-COMPAT-REFUSED: <its message>", and the test process
// exits (status 3): the harness (compat/envoy) reads the line, counts the
// case as refused at start, and runs the cases after it in a new process.
// (Upstream's cases would otherwise wait for a port no one opens, and then
// index into the missing answer.)
//
// Each runner prints "SLUICE-COMPAT-SPAN-START <unix ns>" when NewRunner
// is called and "SLUICE-COMPAT-SPAN-END <unix ns>" when Stop returns: the
// harness reads them to tell whether a case straddled a minute edge (its
// limits' windows are clock-aligned, as upstream's). With
// SLUICE_COMPAT_ALIGN=<seconds> set (the harness sets it when it re-runs
// such a case), NewRunner first waits for the next minute edge unless at
// least that many seconds remain before it.
package runner

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/kelseyhightower/envconfig"
	"github.com/prometheus/statsd_exporter/pkg/mapper"
)

// mapperFile is upstream's mapping, src/stats/prom/default_mapper.yaml.
func mapperFile() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "stats", "prom", "default_mapper.yaml")
}

// Runner is one `sluice serve` process.
type Runner struct {
	s        settings.Settings
	cmd      *exec.Cmd
	stderr   *bytes.Buffer
	done     chan struct{}
	stats    *Store
	startErr error
}

// NewRunner starts `sluice serve` with s as its environment and waits
// until it serves gRPC, or has exited.
func NewRunner(s settings.Settings) Runner {
	alignToMinute()
	fmt.Printf("SLUICE-COMPAT-SPAN-START %d\n", time.Now().UnixNano())
	r := Runner{s: s, done: make(chan struct{}), stderr: &bytes.Buffer{}}
	r.stats = &Store{url: fmt.Sprintf("http://localhost:%d/metrics", s.Port)}
	bin := os.Getenv("SLUICE_BIN")
	if bin == "" {
		r.startErr = fmt.Errorf("SLUICE_BIN is not set: run this suite through compat/envoy (go test ./... there)")
		fmt.Println("SLUICE-COMPAT-ERROR:", r.startErr)
		close(r.done)
		return r
	}
	env, err := Environ(s)
	if err != nil {
		r.startErr = err
		fmt.Println("SLUICE-COMPAT-ERROR:", err)
		close(r.done)
		return r
	}
	// REDIS_TIMEOUT: the test's value (upstream's default, 10s) even when
	// it is the default, since Sluice's default is 50ms (a documented
	// difference, which this restores).
	env = append(env, "REDIS_TIMEOUT="+s.RedisTimeout.String())
	for _, k := range []string{"PATH", "HOME", "SSL_CERT_FILE", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	r.cmd = exec.Command(bin, "serve")
	r.cmd.Env = env
	r.cmd.Stdout = os.Stdout
	r.cmd.Stderr = io.MultiWriter(os.Stderr, &syncWriter{b: r.stderr})
	if err := r.cmd.Start(); err != nil {
		r.startErr = err
		fmt.Println("SLUICE-COMPAT-ERROR:", err)
		close(r.done)
		return r
	}
	go func() { r.cmd.Wait(); close(r.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-r.done:
			r.noteRefused()
			return r
		default:
		}
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("localhost:%d", s.GrpcPort), 200*time.Millisecond); err == nil {
			c.Close()
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
	return r
}

// alignToMinute waits for the next minute edge (and a little after it)
// when fewer than SLUICE_COMPAT_ALIGN seconds remain before it.
func alignToMinute() {
	secs, err := strconv.ParseFloat(os.Getenv("SLUICE_COMPAT_ALIGN"), 64)
	if err != nil || secs <= 0 {
		return
	}
	now := time.Now()
	edge := now.Truncate(time.Minute).Add(time.Minute)
	if edge.Sub(now) < time.Duration(secs*float64(time.Second)) {
		fmt.Printf("SLUICE-COMPAT-ALIGN: waiting %v for the minute edge\n", edge.Sub(now).Round(time.Millisecond))
		time.Sleep(time.Until(edge) + 100*time.Millisecond)
	}
}

// noteRefused reports the binary's refusal and ends the test process.
func (r *Runner) noteRefused() {
	msg := strings.TrimSpace(r.stderr.String())
	if i := strings.LastIndex(msg, "\n"); i >= 0 {
		msg = msg[i+1:]
	}
	fmt.Printf("SLUICE-COMPAT-REFUSED: exit %d: %s\n", r.cmd.ProcessState.ExitCode(), msg)
	os.Exit(3)
}

// Run waits for the process to exit.
func (r *Runner) Run() { <-r.done }

// Stop ends the process (SIGTERM, then SIGKILL after 10s) and waits for it.
func (r *Runner) Stop() {
	defer func() { fmt.Printf("SLUICE-COMPAT-SPAN-END %d\n", time.Now().UnixNano()) }()
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
	}
}

// GetStatsStore returns the statistics, read from the binary's /metrics.
func (r *Runner) GetStatsStore() *Store { return r.stats }

// Environ is s as environment variables: every variable of upstream's
// Settings whose value differs from its default (the fields without an
// envconfig variable, such as the TLS configurations derived from files,
// are not variables).
func Environ(s settings.Settings) ([]string, error) {
	var def settings.Settings
	if err := envconfig.Process("SLUICE_COMPAT_UNSET_", &def); err != nil {
		return nil, err
	}
	var env []string
	v, d := reflect.ValueOf(s), reflect.ValueOf(def)
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name := t.Field(i).Tag.Get("envconfig")
		if name == "" || reflect.DeepEqual(v.Field(i).Interface(), d.Field(i).Interface()) {
			continue
		}
		val, err := format(v.Field(i))
		if err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		env = append(env, name+"="+val)
	}
	return env, nil
}

// format writes a value as envconfig reads it.
func format(v reflect.Value) (string, error) {
	if v.Type() == reflect.TypeOf(time.Duration(0)) {
		return time.Duration(v.Int()).String(), nil
	}
	switch v.Kind() {
	case reflect.String:
		return v.String(), nil
	case reflect.Bool:
		return strconv.FormatBool(v.Bool()), nil
	case reflect.Int, reflect.Int64, reflect.Int32:
		return strconv.FormatInt(v.Int(), 10), nil
	case reflect.Float32:
		return strconv.FormatFloat(v.Float(), 'g', -1, 32), nil
	case reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64), nil
	case reflect.Slice:
		var parts []string
		for i := 0; i < v.Len(); i++ {
			p, err := format(v.Index(i))
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, ","), nil
	case reflect.Map:
		var parts []string
		for _, k := range v.MapKeys() {
			parts = append(parts, k.String()+":"+v.MapIndex(k).String())
		}
		sort.Strings(parts)
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("cannot write a %s as a variable", v.Type())
}

// Store reads upstream's statistics from /metrics: a statsd name is mapped
// to its Prometheus name and labels by upstream's mapping, as upstream's
// Prometheus sink exposes it, and the series with those labels read.
type Store struct {
	url    string
	once   sync.Once
	mapper *mapper.MetricMapper
	err    error
}

// Flush does nothing: every Value reads /metrics afresh.
func (s *Store) Flush() {}

// NewCounter returns the counter named name.
func (s *Store) NewCounter(name string) *Stat {
	return &Stat{s: s, name: name, typ: mapper.MetricTypeCounter}
}

// NewCounterWithTags returns the counter named name with tags as labels.
func (s *Store) NewCounterWithTags(name string, tags map[string]string) *Stat {
	return &Stat{s: s, name: name, typ: mapper.MetricTypeCounter, tags: tags}
}

// NewGauge returns the gauge named name.
func (s *Store) NewGauge(name string) *Stat {
	return &Stat{s: s, name: name, typ: mapper.MetricTypeGauge}
}

// Stat is one statistic.
type Stat struct {
	s    *Store
	name string
	typ  mapper.MetricType
	tags map[string]string
}

// Value is the statistic's value now: 0 when /metrics has no such series
// (as upstream's store answers for a statistic never counted). A failure
// to read /metrics is printed and answers 0.
func (st *Stat) Value() uint64 {
	name, labels, err := st.s.series(st.name, st.typ)
	if err == nil {
		for k, v := range st.tags {
			labels[k] = v
		}
		var val float64
		val, err = scrape(st.s.url, name, labels)
		if err == nil {
			return uint64(val)
		}
	}
	fmt.Printf("SLUICE-COMPAT-ERROR: reading %s: %v\n", st.name, err)
	return 0
}

// series maps a statsd name to its Prometheus name and labels.
func (s *Store) series(name string, typ mapper.MetricType) (string, map[string]string, error) {
	s.once.Do(func() {
		s.mapper = &mapper.MetricMapper{}
		s.err = s.mapper.InitFromFile(mapperFile())
	})
	if s.err != nil {
		return "", nil, s.err
	}
	m, labels, ok := s.mapper.GetMapping(name, typ)
	if !ok || m.Action == mapper.ActionTypeDrop {
		return mapper.EscapeMetricName(name), map[string]string{}, nil
	}
	out := map[string]string{}
	for k, v := range labels {
		out[k] = v
	}
	return m.Name, out, nil
}

// scrape reads the value of the series name{labels} from url: the series
// of that name whose labels are labels, any other label being empty (as
// in PromQL, an empty label is an absent one).
func scrape(url, name string, labels map[string]string) (float64, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		n, ls, val, ok := parseSample(line)
		if !ok || n != name {
			continue
		}
		if sameLabels(ls, labels) {
			return strconv.ParseFloat(val, 64)
		}
	}
	return 0, sc.Err()
}

func sameLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	for k, v := range have {
		if _, ok := want[k]; !ok && v != "" {
			return false
		}
	}
	return true
}

// parseSample splits a line of the text exposition format: name{labels} value.
func parseSample(line string) (name string, labels map[string]string, value string, ok bool) {
	labels = map[string]string{}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return "", nil, "", false
	}
	name, rest := line[:i], line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, ",")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, "=\"")
			if eq < 0 {
				return "", nil, "", false
			}
			k := rest[:eq]
			rest = rest[eq+2:]
			var b strings.Builder
			for j := 0; ; j++ {
				if j >= len(rest) {
					return "", nil, "", false
				}
				if rest[j] == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						b.WriteByte('\n')
					default:
						b.WriteByte(rest[j])
					}
					continue
				}
				if rest[j] == '"' {
					rest = rest[j+1:]
					break
				}
				b.WriteByte(rest[j])
			}
			labels[k] = b.String()
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", nil, "", false
	}
	return name, labels, f[0], true
}

type syncWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
