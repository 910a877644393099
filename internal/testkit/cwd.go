package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

// CwdProbe returns code for lang (python, javascript or typescript; "" for
// any other) that prints what of a kernel depends on the directory it runs
// in: the cwd, a relative file, a child process's cwd, a module of that
// directory found by import or require (python: khlate.py is written after
// the kernel started, as a user writes a file and imports it),
// node_modules there, an ES module import, PWD.
func CwdProbe(lang string) string {
	switch lang {
	case "python":
		return `import os, sys, subprocess, khmod, khlate
print(os.getcwd())
print(open('data.txt').read())
print(subprocess.check_output([sys.executable, '-c', 'import os; print(os.getcwd())'], text=True).strip())
print(khmod.V, khlate.V, os.path.relpath(khmod.__file__))
print(os.environ.get('PWD'), repr(sys.path[0]))`
	case "javascript":
		return `const fs = require('fs');
console.log(process.cwd());
console.log(fs.readFileSync('data.txt', 'utf8'));
console.log(require('child_process').execFileSync(process.execPath, ['-p', 'process.cwd()'], { encoding: 'utf8' }).trim());
console.log(require('./khmod'), require('khpkg'), require.resolve('./khmod'));
console.log((await import('./khesm.mjs')).v);
console.log(process.env.PWD);`
	case "typescript":
		return `import { v } from './khesm.mjs';
import * as fs from 'fs';
const cwd: string = process.cwd();
console.log(cwd);
console.log(fs.readFileSync('data.txt', 'utf8'));
console.log(require('child_process').execFileSync(process.execPath, ['-p', 'process.cwd()'], { encoding: 'utf8' }).trim());
console.log(require('./khmod'), require('khpkg'), require.resolve('./khmod'));
console.log(v);
console.log(process.env.PWD);`
	}
	return ""
}

// CwdFixture fills dir with what CwdProbe's code reads (khlate.py, which the
// python probe imports too, is for the test to write later).
func CwdFixture(tb testing.TB, dir string) {
	tb.Helper()
	files := map[string]string{
		"data.txt":                        "data of " + dir,
		"khmod.py":                        "V = 'py-module'\n",
		"khmod.js":                        "module.exports = 'cjs-module';\n",
		"khesm.mjs":                       "export const v = 'es-module';\n",
		"node_modules/khpkg/package.json": `{"name": "khpkg", "main": "index.js"}`,
		"node_modules/khpkg/index.js":     "module.exports = 'package';\n",
	}
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}
