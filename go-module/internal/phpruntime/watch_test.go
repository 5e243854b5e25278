// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpruntime

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap/zaptest"
)

const (
	watchTestDebounce = 50 * time.Millisecond
	watchTestTimeout  = 3 * time.Second
	watchTestQuiet    = 300 * time.Millisecond
)

// startTestWatcher watches root and returns a channel fed by onChange.
func startTestWatcher(t *testing.T, root string, globs ...string) (*Watcher, <-chan []string) {
	t.Helper()
	// Buffered generously so onChange never blocks Close in cleanup.
	ch := make(chan []string, 100)
	w, err := NewWatcher(root, globs, watchTestDebounce, zaptest.NewLogger(t), func(paths []string) { ch <- paths })
	if err != nil {
		t.Fatalf("NewWatcher: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w, ch
}

func expectChange(t *testing.T, ch <-chan []string, want ...string) {
	t.Helper()
	select {
	case got := <-ch:
		if !slices.Equal(got, want) {
			t.Fatalf("onChange(%q), want %q", got, want)
		}
	case <-time.After(watchTestTimeout):
		t.Fatalf("no onChange within %v, want %q", watchTestTimeout, want)
	}
}

func expectNoChange(t *testing.T, ch <-chan []string) {
	t.Helper()
	select {
	case got := <-ch:
		t.Fatalf("unexpected onChange(%q)", got)
	case <-time.After(watchTestQuiet):
	}
}

// writeFile creates p and its parent directories.
func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWatchEditFiresOnce(t *testing.T) {
	root := t.TempDir()
	index := filepath.Join(root, "index.php")
	writeFile(t, index, "<?php")
	_, ch := startTestWatcher(t, root)

	writeFile(t, index, "<?php echo 1;")
	expectChange(t, ch, index)
	expectNoChange(t, ch)
}

func TestWatchBurstFiresOnceWithAllPaths(t *testing.T) {
	root := t.TempDir()
	a := filepath.Join(root, "a.php")
	b := filepath.Join(root, "src", "b.php")
	writeFile(t, a, "<?php")
	writeFile(t, b, "<?php")
	_, ch := startTestWatcher(t, root)

	for i := range 5 {
		writeFile(t, b, strings.Repeat("x", i))
		writeFile(t, a, strings.Repeat("y", i))
	}
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	expectChange(t, ch, a, b)
	expectNoChange(t, ch)
}

func TestWatchListsAtMost20Paths(t *testing.T) {
	root := t.TempDir()
	_, ch := startTestWatcher(t, root)
	var want []string
	for i := range 30 {
		p := filepath.Join(root, "f"+string(rune('a'+i/10))+string(rune('a'+i%10))+".php")
		writeFile(t, p, "<?php")
		want = append(want, p)
	}
	slices.Sort(want)
	expectChange(t, ch, want[:20]...)
}

func TestWatchIgnoresNonMatching(t *testing.T) {
	root := t.TempDir()
	_, ch := startTestWatcher(t, root)

	writeFile(t, filepath.Join(root, "notes.txt"), "x")
	writeFile(t, filepath.Join(root, ".hidden.php"), "x") // dotfile, glob's last segment isn't
	if err := os.Chmod(filepath.Join(root, "notes.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	expectNoChange(t, ch)
}

func TestWatchChmodAloneDoesNotFire(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "index.php")
	writeFile(t, p, "<?php")
	_, ch := startTestWatcher(t, root)

	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	expectNoChange(t, ch)
}

func TestWatchSkipsDependencyAndHiddenDirs(t *testing.T) {
	root := t.TempDir()
	vendorFile := filepath.Join(root, "vendor", "acme", "lib.php")
	gitFile := filepath.Join(root, ".git", "hooks", "x.php")
	nodeFile := filepath.Join(root, "node_modules", "pkg", "x.php")
	nestedVendor := filepath.Join(root, "src", "vendor", "x.php")
	for _, p := range []string{vendorFile, gitFile, nodeFile, nestedVendor} {
		writeFile(t, p, "<?php")
	}

	t.Run("default", func(t *testing.T) {
		_, ch := startTestWatcher(t, root)
		for _, p := range []string{vendorFile, gitFile, nodeFile, nestedVendor} {
			writeFile(t, p, "<?php // edited")
		}
		// Creating a skipped directory later must not start watching it either.
		writeFile(t, filepath.Join(root, "src", "node_modules", "y.php"), "<?php")
		expectNoChange(t, ch)
	})

	t.Run("named by base", func(t *testing.T) {
		_, ch := startTestWatcher(t, root, "**/*.php", "vendor/**/*.php")
		writeFile(t, vendorFile, "<?php // edited again")
		expectChange(t, ch, vendorFile)
		// Only vendor/ is named; .git and a nested vendor/ stay skipped.
		writeFile(t, gitFile, "<?php // edited again")
		writeFile(t, nestedVendor, "<?php // edited again")
		expectNoChange(t, ch)
	})

	t.Run("named by segment", func(t *testing.T) {
		cfg := filepath.Join(root, "app", ".config", "c.php")
		writeFile(t, cfg, "<?php")
		_, ch := startTestWatcher(t, root, "**/.config/*.php")
		writeFile(t, cfg, "<?php // edited")
		expectChange(t, ch, cfg)
		writeFile(t, gitFile, "<?php // edited once more")
		expectNoChange(t, ch)
	})
}

func TestWatchNewDirectory(t *testing.T) {
	root := t.TempDir()
	_, ch := startTestWatcher(t, root)

	// Whether the file is created before or after the watch on the new
	// directory is added, it must be reported.
	p := filepath.Join(root, "new", "deeper", "a.php")
	writeFile(t, p, "<?php")
	expectChange(t, ch, p)

	q := filepath.Join(root, "new", "deeper", "b.php")
	writeFile(t, q, "<?php")
	expectChange(t, ch, q)
}

func TestWatchDirectoryRenamedIn(t *testing.T) {
	root := t.TempDir()
	_, ch := startTestWatcher(t, root)

	// As cp -r into a temp name or git checkout do: the tree already holds
	// files when it appears under root.
	staging := t.TempDir()
	writeFile(t, filepath.Join(staging, "pkg", "sub", "x.php"), "<?php")
	writeFile(t, filepath.Join(staging, "pkg", "readme.txt"), "x")
	if err := os.Rename(filepath.Join(staging, "pkg"), filepath.Join(root, "pkg")); err != nil {
		t.Fatal(err)
	}
	expectChange(t, ch, filepath.Join(root, "pkg", "sub", "x.php"))

	// Its subdirectories are watched from now on.
	y := filepath.Join(root, "pkg", "sub", "y.php")
	writeFile(t, y, "<?php")
	expectChange(t, ch, y)
}

func TestWatchBaseCreatedLater(t *testing.T) {
	root := t.TempDir()
	_, ch := startTestWatcher(t, root, "src/app/**/*.php")

	writeFile(t, filepath.Join(root, "other", "x.php"), "<?php")
	expectNoChange(t, ch)

	p := filepath.Join(root, "src", "app", "a.php")
	writeFile(t, p, "<?php")
	expectChange(t, ch, p)
}

func TestWatchAbsoluteGlobOutsideRoot(t *testing.T) {
	root, shared := t.TempDir(), t.TempDir()
	p := filepath.Join(shared, "lib", "x.php")
	writeFile(t, p, "<?php")
	_, ch := startTestWatcher(t, root, filepath.ToSlash(shared)+"/**/*.php")

	writeFile(t, p, "<?php // edited")
	expectChange(t, ch, p)
}

func TestWatchRenameOver(t *testing.T) {
	root := t.TempDir()
	index := filepath.Join(root, "index.php")
	writeFile(t, index, "<?php")
	_, ch := startTestWatcher(t, root)

	tmp := filepath.Join(root, "index.php.tmp1234")
	writeFile(t, tmp, "<?php echo 2;")
	if err := os.Rename(tmp, index); err != nil {
		t.Fatal(err)
	}
	expectChange(t, ch, index)
}

func TestWatchIgnoresEditorTempFiles(t *testing.T) {
	root := t.TempDir()
	// Globs that match everything, dotfiles included, so only the
	// temp-file rule can keep these out.
	_, ch := startTestWatcher(t, root, "**/*", "**/.*")

	for _, name := range []string{"index.php~", ".index.php.swp", ".index.php.swx", ".#index.php", "4913"} {
		p := filepath.Join(root, name)
		writeFile(t, p, "x")
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	expectNoChange(t, ch)

	// Sanity check: the globs do match a normal dotfile.
	env := filepath.Join(root, ".env")
	writeFile(t, env, "X=1")
	expectChange(t, ch, env)
}

func TestWatchOverflowFiresWithoutPaths(t *testing.T) {
	root := t.TempDir()
	w, ch := startTestWatcher(t, root)

	// Overflows are hard to provoke; inject one as the backend would.
	w.fsw.Errors <- fsnotify.ErrEventOverflow
	expectChange(t, ch)
}

func TestWatchGlobAboveTheRoot(t *testing.T) {
	app := t.TempDir()
	public := filepath.Join(app, "public")
	if err := os.MkdirAll(filepath.Join(app, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(public, 0o755); err != nil {
		t.Fatal(err)
	}
	ch := make(chan []string, 10)
	w, err := NewWatcher(public, []string{"../src/**/*.php"}, watchTestDebounce, zaptest.NewLogger(t),
		func(paths []string) { ch <- paths })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	changed := filepath.Join(app, "src", "Model.php")
	writeFile(t, changed, "<?php")
	select {
	case got := <-ch:
		if len(got) != 1 || got[0] != changed {
			t.Errorf("changed %v, want %s", got, changed)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a file matched by a glob above the root did not fire")
	}
}

func TestWatchErrors(t *testing.T) {
	root := t.TempDir()
	for _, glob := range []string{"src/[a-", "{a,b"} {
		w, err := NewWatcher(root, []string{"**/*.php", glob}, watchTestDebounce, zaptest.NewLogger(t), func([]string) {})
		if err == nil {
			w.Close()
			t.Errorf("glob %q: no error", glob)
		} else if !strings.Contains(err.Error(), glob) {
			t.Errorf("glob %q: error %q does not name it", glob, err)
		}
	}

	missing := filepath.Join(root, "missing")
	if w, err := NewWatcher(missing, nil, watchTestDebounce, zaptest.NewLogger(t), func([]string) {}); err == nil {
		w.Close()
		t.Errorf("nonexistent root: no error")
	}

	file := filepath.Join(root, "file.php")
	writeFile(t, file, "<?php")
	if w, err := NewWatcher(file, nil, watchTestDebounce, zaptest.NewLogger(t), func([]string) {}); err == nil {
		w.Close()
		t.Errorf("root is a file: no error")
	}
}

func TestWatchClose(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "index.php")
	writeFile(t, p, "<?php")
	w, ch := startTestWatcher(t, root)

	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	writeFile(t, p, "<?php // edited")
	expectNoChange(t, ch)
}

func TestWatchCloseDuringPendingDebounce(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "index.php")
	writeFile(t, p, "<?php")
	ch := make(chan []string, 10)
	w, err := NewWatcher(root, nil, time.Hour, zaptest.NewLogger(t), func(paths []string) { ch <- paths })
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, p, "<?php // edited")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	expectNoChange(t, ch)
}

func TestWatchCloseWaitsForRunningCallback(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "index.php")
	writeFile(t, p, "<?php")
	started, release := make(chan struct{}), make(chan struct{})
	w, err := NewWatcher(root, nil, watchTestDebounce, zaptest.NewLogger(t), func([]string) {
		close(started)
		<-release
	})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, p, "<?php // edited")
	select {
	case <-started:
	case <-time.After(watchTestTimeout):
		t.Fatal("onChange not called")
	}

	closed := make(chan struct{})
	go func() {
		w.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while onChange was running")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(watchTestTimeout):
		t.Fatal("Close did not return after onChange finished")
	}
}

func TestWatchMatchRules(t *testing.T) {
	root := t.TempDir()
	cases := []struct {
		globs []string
		rel   string
		want  bool
	}{
		{nil, "index.php", true},
		{nil, "src/a/b/c.php", true},
		{nil, "index.html", false},
		{nil, ".php", false},
		{nil, "src/.cache/x.php", false},
		{nil, "vendor/x.php", false},
		{nil, "index.php~", false},
		{[]string{"./src/**/*.php"}, "src/x.php", true},
		{[]string{"src/**/*.php"}, "lib/x.php", false},
		{[]string{"vendor/acme/**/*.php"}, "vendor/acme/x/y.php", true},
		{[]string{"vendor/acme/**/*.php"}, "vendor/acme/x/node_modules/y.php", false},
		{[]string{"**/node_modules/**/*.php"}, "a/node_modules/b/y.php", true},
		{[]string{"config/.env*"}, "config/.env.local", true},
		{[]string{"*.{php,phtml}"}, "view.phtml", true},
	}
	for _, c := range cases {
		w, err := NewWatcher(root, c.globs, watchTestDebounce, zaptest.NewLogger(t), func([]string) {})
		if err != nil {
			t.Fatalf("globs %q: %v", c.globs, err)
		}
		if got := w.matches(filepath.Join(root, filepath.FromSlash(c.rel))); got != c.want {
			t.Errorf("globs %q, %s: matches = %v, want %v", c.globs, c.rel, got, c.want)
		}
		w.Close()
	}
}

// TestAFolderMeansItsFiles: a glob naming a folder (Octane's watch paths) watches every
// file under it; one naming a file watches it as it is.
func TestAFolderMeansItsFiles(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "app", "Http"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := parseWatchGlob(root, root+"/app")
	if err != nil {
		t.Fatal(err)
	}
	if dir.pattern != filepath.ToSlash(root)+"/app/**" {
		t.Errorf("a folder watches every file under it: %q", dir.pattern)
	}
	file, err := parseWatchGlob(root, root+"/.env")
	if err != nil || file.pattern != filepath.ToSlash(root)+"/.env" {
		t.Errorf("a file is watched as it is: %q %v", file.pattern, err)
	}
}
