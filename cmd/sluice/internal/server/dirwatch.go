package server

import (
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// A dirWatch watches a configuration directory and every directory above
// it, so that a change in it and a swap of any directory or link on its
// path are seen. A watch follows the links of the path as they were when it
// was set up: after a swap the path is watched afresh (watchPath again).
type dirWatch struct {
	w   *fsnotify.Watcher
	dir string // the directory, absolute and clean
	// onPath maps each directory above dir to the name of the next
	// directory (or link) of the path inside it: only events of that name
	// matter there.
	onPath map[string]string
}

// watchPath watches dir and the directories above it. An ancestor that
// cannot be watched (not readable) ends the climb: what is above it is not
// watched, and the poll is the backstop for a swap there.
func watchPath(dir string) (*dirWatch, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(abs); err != nil {
		w.Close()
		return nil, err
	}
	d := &dirWatch{w: w, dir: abs, onPath: map[string]string{}}
	for p := abs; ; {
		parent := filepath.Dir(p)
		if parent == p || w.Add(parent) != nil {
			break
		}
		d.onPath[parent] = filepath.Base(p)
		p = parent
	}
	return d, nil
}

// relevant reports whether ev may change what the directory holds: any
// event in the directory, or one on the path's next name in a directory
// above it (including the removal or rename of a watched directory
// itself, reported under its own name in its parent's terms).
func (d *dirWatch) relevant(ev fsnotify.Event) bool {
	parent := filepath.Dir(ev.Name)
	if parent == d.dir {
		return true
	}
	next, ok := d.onPath[parent]
	return ok && next == filepath.Base(ev.Name)
}

// events and errors are the watch's channels; nil (never ready) without a
// watch.
func (d *dirWatch) events() <-chan fsnotify.Event {
	if d == nil {
		return nil
	}
	return d.w.Events
}

func (d *dirWatch) errors() <-chan error {
	if d == nil {
		return nil
	}
	return d.w.Errors
}

func (d *dirWatch) close() {
	if d != nil {
		d.w.Close()
	}
}
