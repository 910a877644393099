// Issue 13's table through the official SDK: the cells agents send (cut from
// an indented block, !commands, magics, a trailing ';', plots) run as
// upstream (IPython in Jupyter) runs them. sdk_test.go gives the subprocess
// transport the Python `make run` picks (one with IPython and matplotlib);
// where this machine has none it sets KH_SDK_NO_IPYTHON=1 and these skip
// (never under CI, where the Go test fails instead).
import { test, before } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

const skip = process.env.KH_SDK_NO_IPYTHON === '1' && 'the host has no Python with IPython and matplotlib'

let sbx
let context
// A context of its own: the other test files share the default one.
const run = (code, opts = {}) => sbx.runCode(code, { context, ...opts })
// ipykernel runs !commands through a pty, which ends lines with \r\n.
const lines = (chunks) => chunks.join('').replaceAll('\r\n', '\n')

before(async () => {
  if (skip) return
  sbx = await Sandbox.create()
  context = await sbx.createCodeContext({ language: 'python' })
})

test('an indented cell runs dedented', { skip }, async () => {
  const exec = await run('\n    x = 40\n    print(x + 2)\n')
  assert.equal(exec.error, undefined)
  assert.equal(lines(exec.logs.stdout), '42\n')
})

test('!cmd runs in a shell and its output streams', { skip }, async () => {
  const out = []
  const exec = await run('!echo hi', { onStdout: (m) => out.push(m.line) })
  assert.equal(exec.error, undefined)
  assert.equal(lines(out), 'hi\n')
})

test('line and cell magics run: %env, %pip, %%bash', { skip }, async () => {
  assert.equal((await run('%env KH_SDK_MAGIC=1')).error, undefined)
  assert.equal((await run("import os\nos.environ['KH_SDK_MAGIC']")).text, '1')
  const pip = await run('%pip --version')
  assert.equal(pip.error, undefined)
  assert.match(lines(pip.logs.stdout), /^pip /)
  const bash = await run('%%bash\necho from bash')
  assert.equal(bash.error, undefined)
  assert.equal(lines(bash.logs.stdout), 'from bash\n')
})

test('a trailing semicolon hides the result', { skip }, async () => {
  const exec = await run('1+1;')
  assert.equal(exec.error, undefined)
  assert.equal(exec.results.length, 0)
  assert.equal(exec.text, undefined)
})

test('plt.show() gives a png display', { skip }, async () => {
  const exec = await run('import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()')
  assert.equal(exec.error, undefined)
  assert.equal(exec.results.length, 1)
  assert.equal(exec.results[0].isMainResult, false)
  assert.ok(exec.results[0].png?.startsWith('iVBORw0KGgo'), 'a base64 png')
})

test('a figure left open is shown at the end of the cell, then closed', { skip }, async () => {
  const exec = await run('plt.figure()\nplt.plot([3, 1]);')
  assert.equal(exec.error, undefined)
  assert.equal(exec.results.length, 1)
  assert.ok(exec.results[0].png?.startsWith('iVBORw0KGgo'), 'a base64 png')
  assert.equal((await run('plt.get_fignums()')).text, '[]')
})
