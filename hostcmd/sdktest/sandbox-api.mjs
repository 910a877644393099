// The official SDK's sbx.files and sbx.commands against kernelhost's sandbox
// API, beside sbx.runCode. sandbox_api_test.go starts a host with an access
// token and runs this file with node --test: KH_SANDBOX_URL is the code
// API's address (which serves the sandbox API's paths too), KH_ENVD_URL the
// sandbox API's own listener, KH_TOKEN the token. The SDK is built as its
// Sandbox.create does in debug mode (E2B_DEBUG=true), with the access token
// a created sandbox gets from the control plane: it sends it as
// X-Access-Token on every call.
import { test, before } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { CommandExitError, NotFoundError, AuthenticationError } from 'e2b'

const sandboxOpts = (url, token) => ({
  sandboxId: 'debug_sandbox_id',
  envdVersion: '99.99.99', // what the SDK assumes in debug mode
  debug: true,
  sandboxUrl: url,
  envdAccessToken: token,
})

let sbx // code and files through the code API's address
let envd // files and commands through the sandbox API's own listener
before(() => {
  sbx = new Sandbox(sandboxOpts(process.env.KH_SANDBOX_URL, process.env.KH_TOKEN))
  envd = new Sandbox(sandboxOpts(process.env.KH_ENVD_URL, process.env.KH_TOKEN))
})

test('files.write, then runCode reads it; runCode writes, then files.read', async () => {
  const info = await envd.files.write('data/input.csv', 'x,y\n1,2\n3,4\n')
  assert.equal(info.name, 'input.csv')
  const exec = await sbx.runCode("import pandas as pd\ndf = pd.read_csv('data/input.csv')\ndf.to_csv('data/out.csv', index=False)\nint(df.y.sum())")
  assert.equal(exec.error, undefined)
  assert.equal(exec.text, '6')
  assert.equal(await envd.files.read('data/out.csv'), 'x,y\n1,2\n3,4\n')
  const bytes = await sbx.files.read('data/out.csv', { format: 'bytes' })
  assert.equal(bytes.length, 12)
  const names = (await envd.files.list('data')).map((e) => e.name).sort()
  assert.deepEqual(names, ['input.csv', 'out.csv'])
  await envd.files.rename('data/out.csv', 'data/moved.csv')
  assert.equal(await envd.files.exists('data/out.csv'), false)
  assert.equal(await envd.files.makeDir('data/sub'), true)
  await envd.files.remove('data/sub')
  await assert.rejects(envd.files.read('data/missing.txt'), NotFoundError)
})

test('files.write of many files at once', async () => {
  const infos = await envd.files.write([
    { path: 'many/a.txt', data: 'A' },
    { path: 'many/b.txt', data: 'B' },
  ])
  assert.equal(infos.length, 2)
  assert.equal(await envd.files.read('many/b.txt'), 'B')
})

test('files outside the writable set are refused', async () => {
  await assert.rejects(envd.files.write('/etc/kernelhost-sdk-test', 'x'), /permission|403/i)
  assert.match(await envd.files.read('/etc/os-release'), /ID=/)
})

test('commands.run: stdout, stderr, exit code, env, cwd', async () => {
  await envd.files.write('cmd/in.txt', 'hello')
  const out = []
  const r = await envd.commands.run('cat in.txt; echo " $GREETING"; echo warn >&2', {
    cwd: 'cmd', envs: { GREETING: 'world' }, onStdout: (d) => out.push(d),
  })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'hello world\n')
  // (bash -l reads the machine's login profile, which may warn first)
  assert.match(r.stderr, /(^|\n)warn\n$/)
  assert.equal(out.join(''), 'hello world\n')
  await assert.rejects(envd.commands.run('echo bad; exit 3'), (e) => e instanceof CommandExitError && e.exitCode === 3 && e.stdout === 'bad\n')
  // A file a command writes is the context's too.
  await envd.commands.run('echo from-bash > cmd/made.txt')
  const exec = await sbx.runCode("print(open('cmd/made.txt').read(), end='')")
  assert.deepEqual(exec.logs.stdout, ['from-bash\n'])
})

test('a background command: list, reconnect, stdin, kill', async () => {
  const h = await envd.commands.run('read line; echo "got $line"; sleep 600', { background: true, stdin: true, tag: 'bg' })
  const listed = await envd.commands.list()
  assert.ok(listed.some((p) => p.pid === h.pid))
  await h.disconnect() // the command runs on
  const seen = []
  let answered
  const answer = new Promise((resolve) => { answered = resolve })
  const again = await envd.commands.connect(h.pid, {
    onStdout: (d) => {
      seen.push(d)
      if (seen.join('').includes('\n')) answered()
    },
  })
  await envd.commands.sendStdin(h.pid, 'ping\n')
  await answer // bounded by node --test's run (sandbox_api_test.go's 3 minutes)
  assert.equal(seen.join(''), 'got ping\n')
  assert.equal(await envd.commands.kill(h.pid), true)
  await assert.rejects(again.wait(), CommandExitError)
  assert.equal(await envd.commands.kill(h.pid), false) // gone
})

test('a PTY session with a resize', async () => {
  const chunks = []
  const t = await envd.pty.create({ cols: 80, rows: 24, onData: (d) => chunks.push(Buffer.from(d).toString()) })
  await envd.pty.resize(t.pid, { cols: 132, rows: 43 })
  // Input typed before the shell set up its terminal may be flushed by it:
  // the line is sent again until its answer comes (bounded).
  const line = new TextEncoder().encode('stty size\n')
  for (let i = 0; i < 100 && !/43 132/.test(chunks.join('')); i++) {
    if (!chunks.join('').includes('stty size')) await envd.pty.sendInput(t.pid, line)
    await new Promise((r) => setTimeout(r, 100))
  }
  await envd.pty.sendInput(t.pid, new TextEncoder().encode('exit\n'))
  const r = await t.wait()
  assert.equal(r.exitCode, 0)
  assert.match(chunks.join(''), /43 132/)
})

test('watchDir sees a write', async () => {
  await envd.files.makeDir('watched')
  const events = []
  let seen
  const saw = new Promise((resolve) => { seen = resolve })
  const w = await envd.files.watchDir('watched', (e) => {
    events.push(e)
    if (e.name === 'new.txt') seen()
  })
  await envd.files.write('watched/new.txt', 'n')
  await saw
  await w.stop()
  assert.ok(events.some((e) => e.name === 'new.txt'))
})

test('without the token, or with a wrong one, every call is refused', async () => {
  for (const token of [undefined, 'wrong']) {
    for (const url of [process.env.KH_ENVD_URL, process.env.KH_SANDBOX_URL]) {
      const bad = new Sandbox(sandboxOpts(url, token))
      await assert.rejects(bad.files.read('data/input.csv'), AuthenticationError)
      await assert.rejects(bad.files.write('x.txt', 'x'), AuthenticationError)
      await assert.rejects(bad.commands.run('true'), /unauthenticated|401|Unauthorized/i)
      await assert.rejects(bad.files.list('.'), /unauthenticated|401|Unauthorized/i)
    }
  }
})
