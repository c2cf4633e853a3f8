package memstore

import (
	"context"
	"sync"

	"github.com/sluicehq/sluice/driver"
)

// watchers are the Store's delete watchers (driver.DeleteNotifier). The
// store lives in one process, so a notice is a call, made before
// DeleteNotify returns: a limiter's deny cache on a memstore never refuses a
// key after its Reset returned.
type watchers struct {
	mu sync.Mutex
	by map[string]map[*watcher]bool // prefix → its watchers
}

type watcher struct{ w driver.DeleteWatcher }

// DeleteNotify implements driver.DeleteNotifier: it deletes keys, then
// calls every watcher of prefix with each. It returns 1 when any limiter
// watches prefix (the store's one process heard it), else 0.
func (s *Store) DeleteNotify(ctx context.Context, prefix string, keys ...string) (int, error) {
	if err := s.Delete(ctx, keys...); err != nil {
		return 0, err
	}
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	ws := s.watch.by[prefix]
	for _, k := range keys {
		for w := range ws {
			w.w.Deleted(k)
		}
	}
	return min(len(ws), 1), nil
}

// WatchDeletes implements driver.DeleteNotifier. w is told Watching(true)
// before WatchDeletes returns: every notice reaches it.
func (s *Store) WatchDeletes(prefix string, w driver.DeleteWatcher) (stop func()) {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	if s.watch.by == nil {
		s.watch.by = make(map[string]map[*watcher]bool)
	}
	if s.watch.by[prefix] == nil {
		s.watch.by[prefix] = make(map[*watcher]bool)
	}
	x := &watcher{w}
	s.watch.by[prefix][x] = true
	w.Watching(true)
	var once sync.Once
	return func() {
		once.Do(func() {
			s.watch.mu.Lock()
			defer s.watch.mu.Unlock()
			delete(s.watch.by[prefix], x)
			if len(s.watch.by[prefix]) == 0 {
				delete(s.watch.by, prefix)
			}
		})
	}
}
