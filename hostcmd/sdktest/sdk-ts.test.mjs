// TypeScript contexts and ES module imports through the official SDK
// (issue 15): the SDK's own `test ts kernel` and `test esm imports`, and a
// typescript context's state, results, env, cwd and error lines. Run by
// sdk_test.go like every *.test.mjs here.
import { test, before } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, realpathSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Sandbox } from '@e2b/code-interpreter'

// A Jupyter Server with ipykernel only has no javascript kernel, so no
// typescript either (sdk_test.go sets KH_SDK_NO_JS=1).
const skip = process.env.KH_SDK_NO_JS === '1' && 'no javascript kernel on this transport'

let sbx
before(async () => {
  sbx = await Sandbox.create()
})

test('test ts kernel', { skip }, async () => {
  const output = await sbx.runCode('const message: string = "Hello World!"; console.log(message)', { language: 'ts' })
  assert.deepEqual(output.logs.stdout, ['Hello World!\n'])
})

test('test esm imports', { skip }, async () => {
  const output = await sbx.runCode(`
    import { readFileSync } from 'fs'
    console.log(typeof readFileSync)
    `, { language: 'js' })
  assert.deepEqual(output.logs.stdout, ['function\n'])
})

test('ts simple: the last expression is the result', { skip }, async () => {
  const result = await sbx.runCode('\nfunction subtract(x: number, y: number): number {\n  return x - y;\n}\n\nsubtract(1, 2)\n', { language: 'ts' })
  assert.equal(result.error, undefined)
  assert.equal(result.results[0].text, '-1')
})

test('esm imports in typescript, used by a later cell', { skip }, async () => {
  const ctx = await sbx.createCodeContext({ language: 'typescript' })
  assert.equal(ctx.language, 'typescript')
  const imported = await sbx.runCode("import { join } from 'node:path'\nimport * as os from 'os'\nexport const kh_sep: string = '/'", { context: ctx })
  assert.equal(imported.error, undefined)
  const used = await sbx.runCode("join('a', 'b') + kh_sep + typeof os.platform", { context: ctx })
  assert.equal(used.text, 'a/b/function')
})

test('a typescript context keeps state, awaits, sees its cwd and exact env', { skip }, async () => {
  const cwd = realpathSync(mkdtempSync(join(tmpdir(), 'kh-sdk-ts-')))
  const ctx = await sbx.createCodeContext({ language: 'ts', cwd })
  await sbx.runCode('let kh_count: number = 41', { context: ctx })
  assert.equal((await sbx.runCode('kh_count + 1', { context: ctx })).text, '42')
  assert.equal((await sbx.runCode('await Promise.resolve<string>("done")', { context: ctx })).text, 'done')
  assert.equal((await sbx.runCode('process.cwd() as string', { context: ctx })).text, cwd)
  const value = "it's \"exact\" $HOME\nline"
  const env = await sbx.runCode("process.stdout.write(process.env.KH_TS_ENV as string)", { context: ctx, envs: { KH_TS_ENV: value } })
  assert.deepEqual(env.logs.stdout, [value])
  const after = await sbx.runCode("String(process.env.KH_TS_ENV)", { context: ctx })
  assert.equal(after.text, 'undefined')
})

test('a typescript error names the line of the cell', { skip }, async () => {
  const result = await sbx.runCode('type N = number\n\nconst n: N = 1\nthrow new RangeError(`line four ${n}`)', { language: 'ts' })
  assert.equal(result.error.name, 'RangeError')
  assert.equal(result.error.value, 'line four 1')
  assert.match(result.error.traceback, /Cell In\[\d+\]:4:7/)
})
