// The official @e2b/code-interpreter SDK against a running kernelhost.
// sdk_test.go starts the host on a free port and runs `node --test` with
// E2B_DEBUG=true (no control plane, no tokens) and E2B_SANDBOX_URL pointing
// at the host (the SDK uses it verbatim as the base URL).
import { test, before } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

assert.equal(process.env.E2B_DEBUG, 'true', 'run through sdk_test.go (E2B_DEBUG=true)')
assert.ok(process.env.E2B_SANDBOX_URL, 'run through sdk_test.go (E2B_SANDBOX_URL)')
// A transport without a javascript kernel (a Jupyter Server with ipykernel
// only) has only the python default context: sdk_test.go sets KH_SDK_NO_JS=1.
const hasJS = process.env.KH_SDK_NO_JS !== '1'

let sbx
before(async () => {
  sbx = await Sandbox.create()
})

test('runCode returns the main result and keeps state', async () => {
  const one = await sbx.runCode('1+1')
  assert.equal(one.text, '2')
  assert.equal(one.error, undefined)
  await sbx.runCode('sdk_state = 41')
  const two = await sbx.runCode('sdk_state + 1')
  assert.equal(two.text, '42')
})

test('onStdout and onStderr callbacks fire in order', async () => {
  const out = []
  const err = []
  const exec = await sbx.runCode(
    "import sys\nprint('hello', flush=True)\nprint('oops', file=sys.stderr, flush=True)\nprint('world')",
    { onStdout: (m) => out.push(m.line), onStderr: (m) => err.push(m.line) },
  )
  assert.deepEqual(out, ['hello\n', 'world\n'])
  assert.deepEqual(err, ['oops\n'])
  assert.deepEqual(exec.logs.stdout, ['hello\n', 'world\n'])
  assert.deepEqual(exec.logs.stderr, ['oops\n'])
})

test('errors carry name, value and traceback', async () => {
  const errors = []
  const exec = await sbx.runCode('undefined_name_xyz', { onError: (e) => errors.push(e) })
  assert.equal(exec.error.name, 'NameError')
  assert.equal(exec.error.value, "name 'undefined_name_xyz' is not defined")
  assert.equal(typeof exec.error.traceback, 'string')
  assert.equal(errors.length, 1)
})

test('a non-string code is refused', async () => {
  await assert.rejects(sbx.runCode({ not: 'a string' }))
})

test('code contexts: create, list, restart, remove', async () => {
  const ctx = await sbx.createCodeContext({ language: 'python' })
  assert.equal(ctx.language, 'python')
  const listed = await sbx.listCodeContexts()
  assert.ok(listed.length >= (hasJS ? 3 : 2))
  assert.equal(listed[0].language, 'python')
  if (hasJS) assert.equal(listed[1].language, 'javascript')
  assert.deepEqual(
    { id: listed.at(-1).id, language: listed.at(-1).language, cwd: listed.at(-1).cwd },
    { id: ctx.id, language: ctx.language, cwd: ctx.cwd },
  )

  await sbx.runCode('in_context = 1', { context: ctx })
  assert.equal((await sbx.runCode('in_context', { context: ctx })).text, '1')
  const isolated = await sbx.runCode('in_context')
  assert.equal(isolated.error.name, 'NameError', 'contexts share no state')

  await sbx.restartCodeContext(ctx)
  const gone = await sbx.runCode('in_context', { context: ctx })
  assert.equal(gone.error.name, 'NameError')
  assert.equal(gone.error.value, "name 'in_context' is not defined")

  await sbx.removeCodeContext(ctx.id)
  const after = await sbx.listCodeContexts()
  assert.ok(!after.some((c) => c.id === ctx.id))
  await assert.rejects(sbx.runCode('1', { context: ctx }), /not found/)
})

test('envs are visible to one execution only', async () => {
  const value = `it's "quoted" \\ $(x) \`tick\`\n\ttab é 😀\n`
  // Compare inside Python: a JSON string literal is a valid Python literal.
  const same = await sbx.runCode(`import os; os.environ['SDK_VAR'] == ${JSON.stringify(value)}`, { envs: { SDK_VAR: value } })
  assert.equal(same.error, undefined)
  assert.equal(same.text, 'True')
  const gone = await sbx.runCode("import os; os.environ.get('SDK_VAR') is None")
  assert.equal(gone.text, 'True')
})

test('javascript runs in its own default context', { skip: !hasJS && 'no javascript kernel on this transport' }, async () => {
  const out = []
  await sbx.runCode("console.log('from node')", { language: 'js', onStdout: (m) => out.push(m.line) })
  assert.deepEqual(out, ['from node\n'])
})
