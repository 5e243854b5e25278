// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpruntime

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// DefaultWatchGlob is used when a worker's watch option lists no patterns.
const DefaultWatchGlob = "**/*.php"

// maxListedChanges caps the paths handed to onChange: a branch switch can
// touch thousands of files, and the list is only meant for logging.
const maxListedChanges = 20

// Watcher watches files matching globs under a root and calls onChange, debounced.
type Watcher struct {
	root     string
	globs    []watchGlob
	debounce time.Duration
	logger   *zap.Logger
	onChange func(paths []string)
	fsw      *fsnotify.Watcher

	done      chan struct{} // closed by Close to stop run
	exited    chan struct{} // closed when run has returned
	closeOnce sync.Once
	closeErr  error

	// limitWarned is only touched by NewWatcher and then by run, so it
	// needs no lock: once the inotify watch limit is hit every further Add
	// fails the same way, and one warning is enough.
	limitWarned bool
}

// watchGlob is one parsed pattern.
type watchGlob struct {
	pattern  string          // slash-separated, cleaned; absolute or relative to root
	abs      bool            // pattern is absolute, so match absolute paths
	base     string          // absolute OS path of the pattern's literal prefix
	names    map[string]bool // segments after base, for naming skipped directories
	dotFiles bool            // last segment starts with ".", so dotfiles may match
}

// NewWatcher starts watching. root is an absolute directory. globs are
// doublestar patterns (github.com/bmatcuk/doublestar/v4), relative to root or absolute;
// none means "**/*.php". onChange is called from the watcher's goroutine, at most once
// per quiet period of `debounce` after the last matching event, with the changed paths
// (absolute, deduplicated, sorted, at most 20 listed). Returns an error if root cannot
// be watched or a glob is invalid (doublestar.ValidatePattern), naming it.
//
// After an event queue overflow onChange is called with no paths: something
// changed, but what is unknown. onChange must not call Close (Close waits for it).
func NewWatcher(root string, globs []string, debounce time.Duration, logger *zap.Logger, onChange func(paths []string)) (*Watcher, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("watch root %q: %w", root, err)
	}
	root = abs
	if fi, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("watch root: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("watch root %q is not a directory", root)
	}
	if len(globs) == 0 {
		globs = []string{DefaultWatchGlob}
	}
	w := &Watcher{
		root:     root,
		debounce: debounce,
		logger:   logger,
		onChange: onChange,
		done:     make(chan struct{}),
		exited:   make(chan struct{}),
	}
	for _, g := range globs {
		wg, err := parseWatchGlob(root, g)
		if err != nil {
			return nil, err
		}
		w.globs = append(w.globs, wg)
	}

	w.fsw, err = fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch %q: %w", root, err)
	}
	// Walking root covers every base inside it; bases of absolute globs
	// outside root are walked on their own. Overlapping walks are harmless
	// (adding a watched directory again is a no-op), just redundant.
	if w.wantDir(root) {
		if err := w.addTree(root, nil); err != nil {
			w.fsw.Close()
			return nil, fmt.Errorf("watch root %q: %w", root, err)
		}
	}
	for _, g := range w.globs {
		if _, inRoot := relUnder(root, g.base); inRoot {
			continue
		}
		if err := w.addTree(g.base, nil); err != nil {
			w.warnWatch(g.base, err)
		}
	}

	logger.Debug("watching files for changes",
		zap.String("root", root),
		zap.Strings("globs", globs),
		zap.Int("dirs", len(w.fsw.WatchList())))
	go w.run()
	return w, nil
}

// CheckWatchGlob tells whether g is a glob a Watcher of root takes.
func CheckWatchGlob(root, g string) error {
	_, err := parseWatchGlob(root, g)
	return err
}

// parseWatchGlob validates g and precomputes what matching and walking need.
func parseWatchGlob(root, g string) (watchGlob, error) {
	p := filepath.ToSlash(g)
	if p == "" || !doublestar.ValidatePattern(p) {
		return watchGlob{}, fmt.Errorf("invalid watch glob %q", g)
	}
	// Clean so that "./src/**" matches the "src/..." paths it will be compared to.
	p = path.Clean(p)
	if p == ".." || strings.HasPrefix(p, "../") {
		// Above the root (the app's code beside a public/ root): the same glob, absolute.
		p = path.Join(filepath.ToSlash(root), p)
	}
	// A directory, as FrankenPHP and Octane name one: every file under it.
	if !strings.ContainsAny(p, "*?[{\\") {
		dir := filepath.FromSlash(p)
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(root, dir)
		}
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			p = path.Join(p, "**")
		}
	}
	wg := watchGlob{
		pattern:  p,
		abs:      filepath.IsAbs(filepath.FromSlash(p)),
		names:    map[string]bool{},
		dotFiles: strings.HasPrefix(path.Base(p), "."),
	}
	base, rest := doublestar.SplitPattern(p)
	for _, seg := range strings.Split(rest, "/") {
		wg.names[seg] = true
	}
	if wg.abs {
		wg.base = filepath.FromSlash(base)
	} else {
		wg.base = filepath.Join(root, filepath.FromSlash(base))
	}
	return wg, nil
}

// Close stops watching; no onChange call starts after it returns (wait for a running one to return). Safe to call twice.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		close(w.done)
		<-w.exited
		w.closeErr = w.fsw.Close()
	})
	return w.closeErr
}

// run is the watcher's only goroutine: it owns the pending set and the
// timer, and calls onChange, so onChange never runs concurrently with itself.
func (w *Watcher) run() {
	defer close(w.exited)
	timer := time.NewTimer(w.debounce)
	timer.Stop() // armed by the first matching event
	defer timer.Stop()

	pending := map[string]struct{}{}
	overflow := false
	for {
		select {
		case <-w.done:
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if w.handle(ev, pending) {
				timer.Reset(w.debounce) // restart the quiet period
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.logger.Warn("file watcher error", zap.String("dir", w.root), zap.Error(err))
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				overflow = true
				timer.Reset(w.debounce)
			}
		case <-timer.C:
			var paths []string
			// After an overflow the collected paths are an arbitrary subset;
			// report "unknown" rather than a misleading partial list.
			if !overflow {
				paths = sortedPaths(pending)
			}
			clear(pending)
			overflow = false
			// select picks randomly among ready cases; don't start a call
			// once Close has begun.
			select {
			case <-w.done:
				return
			default:
			}
			w.onChange(paths)
		}
	}
}

// handle records ev in pending if it counts, and reports whether it did.
func (w *Watcher) handle(ev fsnotify.Event, pending map[string]struct{}) bool {
	if !ev.Has(fsnotify.Create | fsnotify.Write | fsnotify.Remove | fsnotify.Rename) {
		return false // Chmod alone: touch -a, permission fixes
	}
	if ev.Has(fsnotify.Create) {
		// A new directory (mkdir -p, cp -r, git checkout, rename into the
		// tree) may already hold files created before we could watch it.
		if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
			if !w.wantDir(ev.Name) {
				return false
			}
			n := len(pending)
			if err := w.addTree(ev.Name, pending); err != nil {
				w.warnWatch(ev.Name, err)
			}
			return len(pending) > n
		}
	}
	if !w.matches(ev.Name) {
		return false
	}
	pending[ev.Name] = struct{}{}
	return true
}

// addTree watches dir and every subdirectory that can hold a match. If
// changed is non-nil, matching files found along the way are added to it.
// It returns the error from watching dir itself; failures below are logged.
func (w *Watcher) addTree(dir string, changed map[string]struct{}) error {
	if err := w.fsw.Add(dir); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		// Most likely removed again already; fsnotify drops its watch.
		w.logger.Debug("cannot list watched directory", zap.String("dir", dir), zap.Error(err))
		return nil
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		// Symlinked directories are not followed (DirEntry reports them as
		// links), which also keeps link cycles from recursing forever.
		if e.IsDir() {
			if w.wantDir(p) {
				if err := w.addTree(p, changed); err != nil {
					w.warnWatch(p, err)
				}
			}
		} else if changed != nil && w.matches(p) {
			changed[p] = struct{}{}
		}
	}
	return nil
}

// warnWatch logs a directory that could not be watched.
func (w *Watcher) warnWatch(dir string, err error) {
	if errors.Is(err, syscall.ENOSPC) {
		if w.limitWarned {
			return
		}
		w.limitWarned = true
		w.logger.Warn("cannot watch directory: watch limit reached (raise fs.inotify.max_user_watches or narrow the watch globs); further directories are not watched",
			zap.String("dir", dir), zap.Error(err))
		return
	}
	w.logger.Warn("cannot watch directory", zap.String("dir", dir), zap.Error(err))
}

// wantDir reports whether dir should be watched: it lies under some glob's
// base without passing through a skipped directory the glob does not name,
// or it is an ancestor of a base, so that creating the base is noticed.
func (w *Watcher) wantDir(dir string) bool {
	for i := range w.globs {
		g := &w.globs[i]
		if rel, ok := relUnder(g.base, dir); ok {
			if g.allowsDirs(rel) {
				return true
			}
		} else if _, ok := relUnder(dir, g.base); ok {
			return true
		}
	}
	return false
}

// matches reports whether the file at p (absolute) is matched by any glob.
func (w *Watcher) matches(p string) bool {
	name := filepath.Base(p)
	if isEditorTemp(name) {
		return false
	}
	for i := range w.globs {
		g := &w.globs[i]
		rel, ok := relUnder(g.base, p)
		if !ok || rel == "." {
			continue
		}
		if strings.HasPrefix(name, ".") && !g.dotFiles {
			continue
		}
		// Same rule as the walk, so a file in a directory watched for
		// another glob (e.g. vendor/ for "vendor/**") doesn't count for
		// "**/*.php".
		if !g.allowsDirs(path.Dir(rel)) {
			continue
		}
		target := filepath.ToSlash(p)
		if !g.abs {
			r, _ := filepath.Rel(w.root, p) // base is under root, so p is too
			target = filepath.ToSlash(r)
		}
		if ok, _ := doublestar.Match(g.pattern, target); ok {
			return true
		}
	}
	return false
}

// allowsDirs reports whether the walk may descend through every directory
// of rel (slash-separated, relative to the glob's base). Directories at or
// above the base are named by the glob by definition, so they are never in rel.
func (g *watchGlob) allowsDirs(rel string) bool {
	if rel == "." {
		return true
	}
	for _, seg := range strings.Split(rel, "/") {
		if isSkippedDir(seg) && !g.names[seg] {
			return false
		}
	}
	return true
}

// isSkippedDir reports whether a directory is skipped unless a glob names it:
// VCS and tool state, and dependency trees that are large and rarely edited.
func isSkippedDir(name string) bool {
	return strings.HasPrefix(name, ".") || name == "vendor" || name == "node_modules"
}

// isEditorTemp reports files that editors write next to the real one while
// saving (vim's swap files and its "4913" write test, emacs lock and backup files).
func isEditorTemp(name string) bool {
	return strings.HasSuffix(name, "~") ||
		strings.HasSuffix(name, ".swp") ||
		strings.HasSuffix(name, ".swx") ||
		strings.HasPrefix(name, ".#") ||
		name == "4913"
}

// relUnder returns p relative to base, slash-separated, if p is base or
// inside it.
func relUnder(base, p string) (string, bool) {
	rel, err := filepath.Rel(base, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	return filepath.ToSlash(rel), true
}

// sortedPaths returns the keys of set sorted, at most maxListedChanges of them.
func sortedPaths(set map[string]struct{}) []string {
	paths := slices.Sorted(maps.Keys(set))
	if len(paths) > maxListedChanges {
		paths = paths[:maxListedChanges]
	}
	return paths
}
