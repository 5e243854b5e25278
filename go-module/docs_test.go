// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

// The documentation lists what the code has: Caddyfile options, metrics, admin routes,
// the thread list's JSON fields. These tests fail when the docs and the code disagree on
// such a list, whichever side gained or lost an item, so the pages under ../docs stay
// true without anyone re-reading them. Each page keeps its lists in tables that follow
// an HTML comment naming the list (`<!-- caddyfile: global -->`, `<!-- admin-routes -->`,
// ...), the item in backticks in the first column; the page's own comment at its top
// says so to its writers.

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/php-worker/php_worker/go-module/internal/cluster"
	"github.com/prometheus/client_golang/prometheus"
)

// docsDir holds the pages the tests read, from the package's folder.
const docsDir = "../docs"

func readDoc(t *testing.T, page string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(docsDir, page))
	if err != nil {
		t.Fatalf("reading the docs: %v", err)
	}
	return string(b)
}

var (
	markerLine    = regexp.MustCompile(`^<!--\s*([a-z-]+)(?::\s*([a-z_-]+))?\s*-->$`)
	firstBacktick = regexp.MustCompile("`([^`]+)`")
	htmlComment   = regexp.MustCompile(`(?s)<!--.*?-->`)
)

// markedTables reads the tables of a page that follow a marker comment `<!-- list -->`
// or `<!-- list: block -->`: for each block of the named list ("" when the marker has
// none), the text in the first backticks of each row's first cell. A marker with no
// table after it, or a row without backticks, fails the test: a table the tests cannot
// read must not pass as an empty list.
func markedTables(t *testing.T, page, list string) map[string][]string {
	t.Helper()
	lines := strings.Split(readDoc(t, page), "\n")
	tables := map[string][]string{}
	for i := 0; i < len(lines); i++ {
		m := markerLine.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil || m[1] != list {
			continue
		}
		block := m[2]
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		row := 0
		for ; j < len(lines) && strings.HasPrefix(lines[j], "|"); j++ {
			if row++; row <= 2 {
				continue // the header and its separator
			}
			// A cell may hold an escaped pipe (`<n>\|auto`): it splits no cell.
			cells := strings.Split(strings.ReplaceAll(lines[j], `\|`, "\x00"), "|")
			item := firstBacktick.FindStringSubmatch(cells[1])
			if item == nil {
				t.Fatalf("%s line %d: the first cell of a %s row has no item in backticks", page, j+1, list)
			}
			tables[block] = append(tables[block], strings.ReplaceAll(item[1], "\x00", "|"))
		}
		if row <= 2 {
			t.Fatalf("%s line %d: the %s marker is not followed by a table with rows", page, i+1, list)
		}
	}
	if len(tables) == 0 {
		t.Fatalf("%s has no table marked <!-- %s -->", page, list)
	}
	return tables
}

// compareLists fails the test with what each side has that the other lacks.
func compareLists(t *testing.T, what string, code, docs []string) {
	t.Helper()
	in := func(list []string, s string) bool { return slices.Contains(list, s) }
	var undocumented, unknown []string
	for _, s := range code {
		if !in(docs, s) && !in(undocumented, s) {
			undocumented = append(undocumented, s)
		}
	}
	for _, s := range docs {
		if !in(code, s) && !in(unknown, s) {
			unknown = append(unknown, s)
		}
	}
	if len(undocumented) > 0 {
		t.Errorf("%s: the code has %q, which the docs do not list", what, undocumented)
	}
	if len(unknown) > 0 {
		t.Errorf("%s: the docs list %q, which the code does not have", what, unknown)
	}
}

// packageFuncs parses the package's Go files (tests excluded) and returns its functions
// and methods by name: "parseWorker", "App.unmarshal", ...
func packageFuncs(t *testing.T) (map[string]*ast.FuncDecl, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	funcs := map[string]*ast.FuncDecl{}
	var parsed []*ast.File
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			key := fn.Name.Name
			if fn.Recv != nil && len(fn.Recv.List) == 1 {
				typ := fn.Recv.List[0].Type
				if star, ok := typ.(*ast.StarExpr); ok {
					typ = star.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					key = id.Name + "." + key
				}
			}
			funcs[key] = fn
		}
	}
	return funcs, parsed
}

// stringLit is the value of a string literal, or "" and false.
func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// isVar tells whether e is the identifier name, or a call of it with no argument
// (d.Val() when name is "Val").
func isVar(e ast.Expr, name string) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == name
	case *ast.CallExpr:
		sel, ok := e.Fun.(*ast.SelectorExpr)
		return ok && sel.Sel.Name == name && len(e.Args) == 0
	}
	return false
}

// comparedStrings collects the string constants fn compares the variable v with: the
// cases of a `switch v` and the operands of `v == "..."`. For a Caddyfile parsing
// function and v the option's name, that is every option it accepts. Reading the source
// keeps the list the tests check out of the tests' own hands; the tests then drive the
// parser with every option found, so a constant that is no option fails too.
func comparedStrings(fn *ast.FuncDecl, v string) []string {
	var out []string
	add := func(e ast.Expr) {
		if s, ok := stringLit(e); ok && s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SwitchStmt:
			if n.Tag == nil || !isVar(n.Tag, v) {
				return true
			}
			for _, stmt := range n.Body.List {
				for _, e := range stmt.(*ast.CaseClause).List {
					add(e)
				}
			}
		case *ast.BinaryExpr:
			if n.Op != token.EQL {
				return true
			}
			if isVar(n.X, v) {
				add(n.Y)
			} else if isVar(n.Y, v) {
				add(n.X)
			}
		}
		return true
	})
	sort.Strings(out)
	return out
}

// caddyfileBlock is a block of the Caddyfile: where the parser reads its options, and
// how to feed it one.
type caddyfileBlock struct {
	funcName string // the parsing function whose source lists the options; "" for none
	// parse runs the parser on a config whose block holds the line option alone, and
	// returns its error.
	parse func(option string) error
}

// refused tells whether the parser's error says option is unknown: the error of an
// option it accepts but whose arguments are missing (the tests give none) is another.
func refused(err error, option string) bool {
	return err != nil && strings.Contains(err.Error(), "unknown") && strings.Contains(err.Error(), strconv.Quote(option))
}

func parseGlobal(body string) error {
	return new(App).UnmarshalCaddyfile(caddyfile.NewTestDispenser("php_worker {\n" + body + "\n}"))
}

// parseSite feeds the site directive under each of its names (php_worker, php_server,
// php): an option any of them accepts is accepted, as the page documents the three
// together and says which takes what.
func parseSite(body string) error {
	var last error
	for _, dl := range []dialect{dialectPHPWorker, dialectPHPServer, dialectPHP} {
		h := new(Handler)
		if dl == dialectPHP {
			h.Index, h.DisableFileServer = "off", true
		}
		err := h.unmarshal(caddyfile.NewTestDispenser("php_worker {\n"+body+"\n}"), dl)
		if err == nil {
			return nil
		}
		last = err
		if !strings.Contains(err.Error(), "unknown") {
			return err
		}
	}
	return last
}

var caddyfileBlocks = map[string]caddyfileBlock{
	"global": {"App.unmarshal", func(o string) error { return parseGlobal(o) }},
	"site":   {"Handler.unmarshal", func(o string) error { return parseSite(o) }},
	"worker": {"parseWorker", func(o string) error { return parseSite("worker {\n" + o + "\n}") }},
	// A background block is a worker block that Provision restricts further: the page
	// lists only what background scripts take, so only that direction is checked.
	"background": {"", func(o string) error { return parseGlobal("background {\n" + o + "\n}") }},
	"schedule": {"parseSchedule", func(o string) error {
		return parseGlobal("schedule \"* * * * *\" job.php {\n" + o + "\n}")
	}},
}

// TestDocsCaddyfile checks docs/caddyfile.md against the Caddyfile parser: every option
// each block's parsing function accepts has a row in that block's table, and every row
// names an option the parser accepts there. The accepted options come from the Go
// source of the parsing functions (the string constants they compare the option's name
// with), and each is confirmed by running the parser on it: an option it does not know
// gets an "unknown ... option" error, one it knows another error at worst (the test gives
// no arguments). The directives are those the package registers with httpcaddyfile.
func TestDocsCaddyfile(t *testing.T) {
	funcs, files := packageFuncs(t)
	tables := markedTables(t, "caddyfile.md", "caddyfile")
	name := func(item string) string { return strings.Fields(item)[0] }

	for block, b := range caddyfileBlocks {
		var documented []string
		for _, item := range tables[block] {
			documented = append(documented, name(item))
		}
		if len(documented) == 0 {
			t.Errorf("caddyfile.md has no table for the %s block", block)
			continue
		}
		for _, o := range documented {
			if err := b.parse(o); refused(err, o) {
				t.Errorf("caddyfile.md documents %s in the %s block, which the parser refuses: %v", o, block, err)
			}
		}
		// The check above means something only if the parser does refuse an option.
		if err := b.parse("no_such_option_in_docs"); !refused(err, "no_such_option_in_docs") {
			t.Errorf("the %s block's parser accepts an unknown option (error %v): the test cannot tell options apart", block, err)
		}
		if b.funcName == "" {
			continue
		}
		fn := funcs[b.funcName]
		if fn == nil {
			t.Fatalf("no function %s in the package: update caddyfileBlocks", b.funcName)
		}
		accepted := comparedStrings(fn, "name")
		if len(accepted) == 0 {
			t.Fatalf("%s compares no option name (a variable `name`) with a constant: update the test to how it parses", b.funcName)
		}
		for _, o := range accepted {
			if err := b.parse(o); refused(err, o) {
				t.Errorf("%s compares the name with %q, which the parser refuses in the %s block: %v", b.funcName, o, block, err)
			}
		}
		compareLists(t, "the "+block+" block", accepted, documented)
	}

	// Directives and global options: the names the package registers.
	var registered []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "RegisterGlobalOption" && sel.Sel.Name != "RegisterHandlerDirective" &&
				sel.Sel.Name != "RegisterDirective") {
				return true
			}
			if s, ok := stringLit(call.Args[0]); ok && !slices.Contains(registered, s) {
				registered = append(registered, s)
			}
			return true
		})
	}
	var directives []string
	for _, item := range tables["directives"] {
		directives = append(directives, name(item))
	}
	compareLists(t, "directives and global options", registered, directives)
}

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	metricName = regexp.MustCompile(`\bphp_worker_[a-z0-9_]+`)
)

// TestDocsMetrics checks docs/metrics.md against the collector: its table lists every
// metric the collector describes, with its labels (`php_worker_x{label,label}`), and
// nothing else; any other php_worker_* name on the page is one of those metrics.
func TestDocsMetrics(t *testing.T) {
	ch := make(chan *prometheus.Desc, 256)
	newCollector(php).Describe(ch)
	close(ch)
	var registered, names []string
	for d := range ch {
		s := d.String()
		n, l := descName.FindStringSubmatch(s), descLabels.FindStringSubmatch(s)
		if n == nil || l == nil {
			t.Fatalf("cannot read the name and labels of %s", s)
		}
		names = append(names, n[1])
		if l[1] != "" {
			registered = append(registered, n[1]+"{"+l[1]+"}")
		} else {
			registered = append(registered, n[1])
		}
	}
	documented := markedTables(t, "metrics.md", "metrics")[""]
	compareLists(t, "metrics (with their labels)", registered, documented)

	page := htmlComment.ReplaceAllString(readDoc(t, "metrics.md"), "")
	for _, m := range metricName.FindAllString(page, -1) {
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if s, ok := strings.CutSuffix(m, suffix); ok && slices.Contains(names, s) {
				base = s
			}
		}
		if !slices.Contains(names, base) {
			t.Errorf("metrics.md names %s, which is no metric", m)
		}
	}
}

var (
	routeItem   = regexp.MustCompile(`^([A-Z]+) (/\S+)$`)
	routeInText = regexp.MustCompile("(?:^|[\\s(`'\"]|:[0-9]{2,5})(/(?:php_worker|frankenphp)/[a-z_/]*[a-z_])")
	statusData  = regexp.MustCompile(`\?data=([a-z_]+)`)
)

// TestDocsAdminRoutes checks docs/reloads-and-admin-api.md against the admin API: its
// table lists every route the admin module registers, with the method the route takes
// (the route answers it with something else than 405, and another method with 405),
// and nothing else. Every /php_worker/... or /frankenphp/... path any page or the README
// names must be a route. And status-page.md names every ?data= the status page answers.
func TestDocsAdminRoutes(t *testing.T) {
	routes := (&adminAPI{rt: php}).Routes()
	var patterns []string
	handlers := map[string]caddy.AdminHandler{}
	for _, r := range routes {
		patterns = append(patterns, r.Pattern)
		handlers[r.Pattern] = r.Handler
	}
	// With PHP not running, no route waits or acts (a restart, a 10 s profile): each
	// answers at once, so the methods can be tried. Another test's engine would make
	// them act, as the probes' and the profile's own tests know.
	tryMethods := php.Engine() == nil
	if !tryMethods {
		t.Log("an engine runs in this test binary: the routes' methods are not tried")
	}
	var documented []string
	for _, item := range markedTables(t, "reloads-and-admin-api.md", "admin-routes")[""] {
		m := routeItem.FindStringSubmatch(item)
		if m == nil {
			t.Errorf("reloads-and-admin-api.md: %q is not `METHOD /path`", item)
			continue
		}
		method, path := m[1], m[2]
		documented = append(documented, path)
		h := handlers[path]
		if h == nil || !tryMethods {
			continue // compareLists says what is missing
		}
		// The documented method gets an answer (an error such as 503 at worst), another
		// method 405.
		if status := adminStatus(h, method, path); status == http.StatusMethodNotAllowed {
			t.Errorf("%s %s: the docs give this method, the route answers it 405", method, path)
		}
		other := http.MethodGet
		if method == http.MethodGet {
			other = http.MethodDelete
		}
		if status := adminStatus(h, other, path); status != http.StatusMethodNotAllowed {
			t.Errorf("%s %s answers %d, not 405: does the route take another method than the docs say (%s)?",
				other, path, status, method)
		}
	}
	compareLists(t, "admin routes", patterns, documented)

	pages, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(docsDir, "..", "README.md"))
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range routeInText.FindAllStringSubmatch(string(b), -1) {
			if !slices.Contains(patterns, m[1]) {
				t.Errorf("%s names %s, which is no admin route", filepath.Base(page), m[1])
			}
		}
	}

	// The status page's data, from the switch of StatusHandler.ServeHTTP on `data`.
	funcs, _ := packageFuncs(t)
	fn := funcs["StatusHandler.ServeHTTP"]
	if fn == nil {
		t.Fatal("no StatusHandler.ServeHTTP: update the test")
	}
	served := comparedStrings(fn, "data")
	if len(served) == 0 {
		t.Fatal("StatusHandler.ServeHTTP compares no `data` with a constant: update the test")
	}
	var named []string
	for _, item := range markedTables(t, "status-page.md", "status-data")[""] {
		m := statusData.FindStringSubmatch(item)
		if m == nil {
			t.Errorf("status-page.md: %q is not `?data=<name>`", item)
			continue
		}
		named = append(named, m[1])
	}
	compareLists(t, "the status page's ?data=", served, named)
}

// adminStatus is the status an admin route answers a request with.
func adminStatus(h caddy.AdminHandler, method, path string) int {
	rec := httptest.NewRecorder()
	err := h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	var apiErr caddy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.HTTPStatus
	}
	if err != nil {
		return http.StatusInternalServerError
	}
	return rec.Code
}

// TestDocsThreadListFields checks the table of the thread list's JSON in
// docs/reloads-and-admin-api.md against the engine's snapshot: rust-core writes every
// field of it in tests/golden/stats.json (its own test keeps that file true), so each
// field path there (`pools[].duration.sum`) has a row, and each row is such a path; so
// have the fields a cluster of processes adds (cluster.SnapshotFields).
func TestDocsThreadListFields(t *testing.T) {
	b, err := os.ReadFile("../rust-core/tests/golden/stats.json")
	if err != nil {
		t.Fatal(err)
	}
	var snapshot any
	if err := json.Unmarshal(b, &snapshot); err != nil {
		t.Fatal(err)
	}
	var fields []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				path := k
				if prefix != "" {
					path = prefix + "." + k
				}
				fields = append(fields, path)
				walk(path, child)
			}
		case []any:
			for _, child := range v {
				walk(prefix+"[]", child)
			}
		}
	}
	walk("", snapshot)
	fields = append(fields, cluster.SnapshotFields...) // with processes above 1
	sort.Strings(fields)
	fields = slices.Compact(fields)
	documented := markedTables(t, "reloads-and-admin-api.md", "threads-json")[""]
	compareLists(t, "the thread list's fields", fields, documented)
}

var (
	mdLink       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading    = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	codeSpan     = regexp.MustCompile("`([^`\n]+)`")
	slugDrop     = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	placeholder  = regexp.MustCompile(`<[a-z-]+>`)
	repoPathRoot = regexp.MustCompile(`^(go-module|rust-core|scripts|tests|packaging|adapters|demo|docs)/`)
)

// slug is the anchor GitHub gives a heading: lower case, punctuation dropped, spaces
// made hyphens.
func slug(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	return strings.ReplaceAll(slugDrop.ReplaceAllString(s, ""), " ", "-")
}

// TestDocsLinks checks that the README and every page under docs/ point at what exists:
// each relative link's file (and, for a markdown page, its #anchor among the page's
// headings), and each file path of the repository written in backticks
// (`go-module/metrics.go`, `scripts/php-patches/<minor>/`, a <placeholder> standing for
// any name). Moved files and renamed sections were the most common wrong claims. And
// the README and docs/README.md link to every page.
func TestDocsLinks(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(docsDir, "..", "README.md"))
	anchors := map[string][]string{}
	anchorsOf := func(page string) []string {
		if a, ok := anchors[page]; ok {
			return a
		}
		b, err := os.ReadFile(page)
		if err != nil {
			return nil
		}
		var list []string
		for _, m := range mdHeading.FindAllStringSubmatch(string(b), -1) {
			list = append(list, slug(m[1]))
		}
		anchors[page] = list
		return list
	}
	repo := filepath.Join(docsDir, "..")
	linked := map[string][]string{} // page -> the pages its links reach
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		name := filepath.Base(filepath.Dir(page)) + "/" + filepath.Base(page)
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				linked[page] = append(linked[page], filepath.Clean(path))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s, which does not exist", name, target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !slices.Contains(anchorsOf(path), anchor) {
				t.Errorf("%s links to %s: %s has no heading with that anchor", name, target, filepath.Base(path))
			}
		}
		for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
			fields := strings.Fields(m[1])
			if len(fields) == 0 || !repoPathRoot.MatchString(fields[0]) {
				continue
			}
			pattern := placeholder.ReplaceAllString(strings.TrimSuffix(fields[0], "/"), "*")
			if found, _ := filepath.Glob(filepath.Join(repo, pattern)); len(found) == 0 {
				t.Errorf("%s names %s, which is not in the repository", name, fields[0])
			}
		}
	}
	// The README and the docs' index reach every page.
	index, readme := filepath.Join(docsDir, "README.md"), filepath.Join(repo, "README.md")
	for _, page := range pages {
		page = filepath.Clean(page)
		if page == filepath.Clean(index) || page == filepath.Clean(readme) {
			continue
		}
		for from, fromName := range map[string]string{index: "docs/README.md", readme: "README.md"} {
			if !slices.Contains(linked[from], page) {
				t.Errorf("%s does not link to docs/%s", fromName, filepath.Base(page))
			}
		}
	}
}
