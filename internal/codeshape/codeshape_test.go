package codeshape

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/internal/testkit"
)

// maxFuncLines is the longest a function may be, from its func line to its
// closing brace: past it a reader no longer holds the whole in mind.
const maxFuncLines = 80

// exceptions are the places the rules do not hold yet, with the reason; each
// is "file:name" relative to the repository root. An exception that no longer
// applies is reported in the log (go test -v) so that it can be removed; it
// does not fail the test, which must not break when the fix lands first.
var exceptions = map[string]string{}

// TestCodeShape parses every non-test, non-generated Go file of the
// repository and checks both rules.
func TestCodeShape(t *testing.T) {
	root := testkit.Root()
	used := map[string]bool{}
	check := func(place, problem string) {
		if _, ok := exceptions[place]; ok {
			used[place] = true
			return
		}
		t.Errorf("%s: %s", place, problem)
	}
	fset := token.NewFileSet()
	for _, rel := range goSources(t, root) {
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if ast.IsGenerated(f) {
			continue
		}
		for name, lines := range longFuncs(fset, f) {
			check(rel+":"+name, "the function is "+strconv.Itoa(lines)+" lines long, more than "+strconv.Itoa(maxFuncLines)+": split it into helpers whose names say what each part does")
		}
		for _, name := range exportedVars(f) {
			check(rel+":"+name, "an exported package-level variable; make it a function returning a fresh value, a constant, or unexported (sentinel errors made with errors.New are fine)")
		}
	}
	for place, why := range exceptions {
		if !used[place] {
			t.Logf("exception %s (%s) no longer applies: remove it from the list", place, why)
		}
	}
}

// goSources returns the repository's Go files that are not tests, relative
// to root, skipping test data, dependencies and build output.
func goSources(t *testing.T, root string) []string {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
				name == "testdata" || name == "node_modules" || name == "bin" || name == "dist") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 50 {
		t.Fatalf("found %d Go files under %s: the walk is looking in the wrong place", len(files), root)
	}
	return files
}

// longFuncs returns the functions (declared or literal) of f longer than
// maxFuncLines, by name ("func literal@LINE" for a literal), with their length.
func longFuncs(fset *token.FileSet, f *ast.File) map[string]int {
	long := map[string]int{}
	ast.Inspect(f, func(n ast.Node) bool {
		var name string
		var body *ast.BlockStmt
		switch fn := n.(type) {
		case *ast.FuncDecl:
			name, body = fn.Name.Name, fn.Body
		case *ast.FuncLit:
			name, body = "func literal@"+strconv.Itoa(fset.Position(fn.Pos()).Line), fn.Body
		default:
			return true
		}
		if body == nil { // an assembly or linkname declaration
			return true
		}
		if lines := fset.Position(body.End()).Line - fset.Position(n.Pos()).Line + 1; lines > maxFuncLines {
			long[name] = lines
		}
		return true
	})
	return long
}

// exportedVars returns the exported package-level variables of f, but for
// sentinel errors (var ErrX = errors.New(...)), Go's idiom for errors that
// callers test with errors.Is.
func exportedVars(f *ast.File) []string {
	var names []string
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if name.IsExported() && !(i < len(vs.Values) && isErrorsNew(vs.Values[i])) {
					names = append(names, name.Name)
				}
			}
		}
	}
	return names
}

func isErrorsNew(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "errors" && sel.Sel.Name == "New"
}
