// R and Java contexts of the subprocess transport through the official SDK:
// the upstream SDK tests' per-request env checks (R Sys.getenv, Java
// System.getProperty), values, state, stdout, cwd and errors. The Jupyter
// runs (KH_SDK_TRANSPORT=jupyter) have neither language's kernel here.
import { test, before } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

const subprocess = process.env.KH_SDK_TRANSPORT !== 'jupyter'

let sbx
before(async () => {
  sbx = await Sandbox.create()
})

test('r: env per request, value, state, stdout, error, cwd', { skip: !subprocess && 'no R on this transport' }, async () => {
  const env = await sbx.runCode('Sys.getenv("FOO")', { language: 'r', envs: { FOO: 'bar' } })
  assert.equal(env.error, undefined)
  assert.equal(env.results[0].text, '[1] "bar"')
  assert.equal(env.text, '[1] "bar"')
  const gone = await sbx.runCode('Sys.getenv("FOO", unset = NA)', { language: 'r' })
  assert.equal(gone.text, '[1] NA')

  const out = []
  const set = await sbx.runCode('x <- 41\ncat("hello\\n")', { language: 'r', onStdout: (m) => out.push(m.line) })
  assert.deepEqual(out, ['hello\n'])
  assert.deepEqual(set.logs.stdout, ['hello\n'])
  assert.equal((await sbx.runCode('x + 1', { language: 'r' })).text, '[1] 42')

  const df = await sbx.runCode('data.frame(a = 1:2)', { language: 'r' })
  assert.match(df.results[0].html, /^<table/)

  const err = await sbx.runCode('stop("boom")', { language: 'r' })
  assert.equal(err.error.name, 'ERROR')
  assert.equal(err.error.value, 'boom')

  const ctx = await sbx.createCodeContext({ language: 'r', cwd: '/tmp' })
  assert.equal((await sbx.runCode('getwd()', { context: ctx })).text, '[1] "/tmp"')
  await sbx.removeCodeContext(ctx)
})

test('java: env per request, value, state, stdout, error, cwd', { skip: !subprocess && 'no Java on this transport' }, async () => {
  const env = await sbx.runCode('System.getProperty("FOO")', { language: 'java', envs: { FOO: 'bar' } })
  assert.equal(env.error, undefined)
  assert.equal(env.results[0].text, 'bar')
  const getenv = await sbx.runCode('System.getenv("FOO")', { language: 'java', envs: { FOO: 'bar' } })
  assert.equal(getenv.text, 'bar')
  const gone = await sbx.runCode('System.getProperty("FOO") == null && System.getenv("FOO") == null', { language: 'java' })
  assert.equal(gone.text, 'true')

  const out = []
  const set = await sbx.runCode('int x = 41;\nSystem.out.println("hello");', { language: 'java', onStdout: (m) => out.push(m.line) })
  assert.deepEqual(out, ['hello\n'])
  assert.deepEqual(set.logs.stdout, ['hello\n'])
  assert.equal((await sbx.runCode('x + 1', { language: 'java' })).text, '42')

  const err = await sbx.runCode('throw new IllegalStateException("boom");', { language: 'java' })
  assert.equal(err.error.name, 'java.lang.IllegalStateException')
  assert.equal(err.error.value, 'boom')

  const ctx = await sbx.createCodeContext({ language: 'java', cwd: '/tmp' })
  assert.equal((await sbx.runCode('System.getProperty("user.dir")', { context: ctx })).text, '/tmp')
  await sbx.removeCodeContext(ctx)
})
