// The browser protections (issue 11 item 1; docs/operating.md, "Browsers")
// leave the official SDK working: it sends Content-Type: application/json,
// no Origin, and Host localhost:PORT with E2B_DEBUG alone. What a web page
// would send instead is refused.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

const base = new URL(process.env.E2B_SANDBOX_URL)

test('the SDK through localhost (the Host E2B_DEBUG makes it send)', async () => {
  const sbx = await Sandbox.create({ sandboxUrl: `http://localhost:${base.port}` })
  const exec = await sbx.runCode('6 * 7')
  assert.equal(exec.text, '42')
  assert.equal(exec.error, undefined)
})

test("a page's simple request (text/plain body) is refused with 415", async () => {
  const res = await fetch(new URL('/execute', base), {
    method: 'POST',
    headers: { 'Content-Type': 'text/plain' },
    body: JSON.stringify({ code: '1+1' }),
  })
  assert.equal(res.status, 415)
  assert.match(await res.text(), /application\/json/)
})

test('a request from a foreign origin is refused with 403, without CORS headers', async () => {
  const res = await fetch(new URL('/execute', base), {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Origin: 'http://evil.test' },
    body: JSON.stringify({ code: '1+1' }),
  })
  assert.equal(res.status, 403)
  assert.equal(res.headers.get('access-control-allow-origin'), null)
  await res.text()
})
