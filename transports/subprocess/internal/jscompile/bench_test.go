package jscompile

import "testing"

// typedCell is a typical typescript cell: an interface, a typed function, a
// generic, a cast.
const typedCell = "interface Point { x: number; y: number }\n" +
	"function norm(p: Point): number {\n  return Math.sqrt(p.x * p.x + p.y * p.y)\n}\n" +
	"function first<T>(xs: T[]): T | undefined {\n  return xs[0]\n}\n" +
	"var pts: Point[] = [{ x: 3, y: 4 }, { x: 1, y: 1 }]\n" +
	"norm(first(pts) as Point)"

// BenchmarkPrepareCell is the host's work on a javascript or typescript
// cell before it is sent: esbuild's transform and the module-syntax
// rewrite. ns/op is one cell.
func BenchmarkPrepareCell(b *testing.B) {
	for _, c := range []struct {
		name    string
		prepare func(string) Cell
		code    string
	}{
		{"javascript-1+1", JavaScript, "1+1"},
		{"javascript-imports", JavaScript, "import { readFileSync } from 'fs'\nimport * as path from 'node:path'\ntypeof readFileSync + path.sep"},
		{"typescript-1+1", TypeScript, "1+1"},
		{"typescript-typed-cell", TypeScript, typedCell},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got := c.prepare(c.code); got.Err != nil {
					b.Fatal(got.Err.Message)
				}
			}
		})
	}
}
