// kernelhost's MCP tools through the official TypeScript MCP client
// (@modelcontextprotocol/sdk), over stdio (it starts `kernelhost mcp` as an
// MCP host's config does) and over streamable HTTP (/mcp on a host that
// sdk_test.go's TestMCPClientTS started with an access token). Not a
// *.test.mjs: TestOfficialSDK runs those against hosts of its own.
//
// Environment: KH_MCP_URL (the host's /mcp), KH_MCP_TOKEN, KH_MCP_COMMAND
// (the kernelhost binary; its settings come from this process's KERNELHOST_*).
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'

const url = new URL(process.env.KH_MCP_URL)
const token = process.env.KH_MCP_TOKEN

function httpTransport(headers = { Authorization: `Bearer ${token}` }) {
  return new StreamableHTTPClientTransport(url, { requestInit: { headers } })
}

async function connect(transport) {
  const client = new Client({ name: 'kernelhost-sdktest', version: '1.0.0' })
  await client.connect(transport)
  return client
}

const text = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n')

async function run(client, args, options) {
  const res = await client.callTool({ name: 'run_code', arguments: args }, undefined, options)
  assert.ok(!res.isError, `run_code ${JSON.stringify(args)} failed: ${text(res)}`)
  return res
}

function suite(name, makeTransport) {
  describe(name, () => {
    let client
    before(async () => { client = await connect(makeTransport()) })
    after(async () => { await client.close() })

    test('lists the tools, with schemas and descriptions', async () => {
      const { tools } = await client.listTools()
      assert.deepEqual(tools.map((t) => t.name).sort(), ['create_context', 'delete_context', 'fork_context', 'list_contexts', 'restart_context', 'run_code'])
      const runCode = tools.find((t) => t.name === 'run_code')
      assert.deepEqual(runCode.inputSchema.required, ['code'])
      assert.ok(runCode.inputSchema.properties.env_vars && runCode.description.length > 100)
    })

    test('python prints and returns a value', async () => {
      const res = await run(client, { code: "print('hi from ts')\n6*7" })
      assert.equal(res.structuredContent.stdout, 'hi from ts\n')
      assert.equal(res.structuredContent.results[0].text, '42')
      assert.match(text(res), /Result:\n42/)
    })

    test('python state across calls', async () => {
      await run(client, { code: "ts_state = 'kept'" })
      const res = await run(client, { code: 'ts_state' })
      assert.match(text(res), /kept/)
    })

    test('a matplotlib chart is a PNG image and a structured chart', async () => {
      const res = await run(client, { code: "import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5])\nplt.title('ts chart')\nplt.show()" })
      const image = res.content.find((c) => c.type === 'image')
      assert.equal(image?.mimeType, 'image/png')
      const png = Buffer.from(image.data, 'base64')
      assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
      const chart = res.structuredContent.results[0].chart
      assert.equal(chart.title, 'ts chart')
      assert.equal(chart.type, 'bar')
    })

    test('an exception is isError with its traceback', async () => {
      const res = await client.callTool({ name: 'run_code', arguments: { code: "raise ValueError('bad ts value')" } })
      assert.equal(res.isError, true)
      assert.equal(res.structuredContent.error.name, 'ValueError')
      assert.match(text(res), /ValueError: bad ts value/)
    })

    for (const [language, code, want] of [
      ['javascript', "console.log(['x', 'y'].join('+'))", 'x+y'],
      ['bash', 'echo bash-$((40+2))', 'bash-42'],
      ['r', 'print(sum(1:4))', '10'],
    ]) {
      test(`runs ${language}`, async () => {
        const res = await run(client, { code, language })
        assert.match(text(res), new RegExp(want.replace('+', '\\+')))
      })
    }

    test('env_vars are kept to one call', async () => {
      const code = "import os\nprint(os.environ.get('TS_SECRET'))"
      assert.equal((await run(client, { code, env_vars: { TS_SECRET: 'shh' } })).structuredContent.stdout, 'shh\n')
      assert.equal((await run(client, { code })).structuredContent.stdout, 'None\n')
    })

    test('contexts: create, run, list, restart, delete', async () => {
      const created = await client.callTool({ name: 'create_context', arguments: { language: 'python' } })
      const id = created.structuredContent.id
      await run(client, { code: 'own = 1', context_id: id })
      const list = await client.callTool({ name: 'list_contexts', arguments: {} })
      assert.ok(list.structuredContent.contexts.some((c) => c.id === id))
      await client.callTool({ name: 'restart_context', arguments: { context_id: id } })
      assert.equal((await client.callTool({ name: 'run_code', arguments: { code: 'own', context_id: id } })).isError, true)
      await client.callTool({ name: 'delete_context', arguments: { context_id: id } })
      const gone = await client.callTool({ name: 'run_code', arguments: { code: '1', context_id: id } })
      assert.equal(gone.isError, true)
      assert.match(text(gone), /not found/)
    })

    test('cancelling while True: pass interrupts it; the next call works', async () => {
      await run(client, { code: "before = 'still here'" })
      const abort = new AbortController()
      let started
      const running = new Promise((resolve) => { started = resolve })
      const call = client.callTool({ name: 'run_code', arguments: { code: "print('spinning', flush=True)\nwhile True: pass" } }, undefined, {
        signal: abort.signal,
        timeout: 120_000,
        onprogress: (p) => { if (p.message === 'spinning\n') started() },
      })
      await running
      abort.abort('the test cancels')
      await assert.rejects(call)
      const res = await run(client, { code: 'before' }, { timeout: 60_000 })
      assert.match(text(res), /still here/)
    })
  })
}

suite('stdio (kernelhost mcp)', () => new StdioClientTransport({
  command: process.env.KH_MCP_COMMAND,
  args: ['mcp'],
  env: process.env,
  stderr: 'inherit',
}))

suite('streamable HTTP (/mcp)', () => httpTransport())

describe('streamable HTTP refusals', () => {
  test('a wrong token is refused', async () => {
    await assert.rejects(connect(httpTransport({ Authorization: 'Bearer wrong' })), /401|Unauthorized/)
  })
  test('no token is refused', async () => {
    await assert.rejects(connect(httpTransport({})), /401|Unauthorized/)
  })
  test('a foreign Origin is refused', async () => {
    await assert.rejects(connect(httpTransport({ Authorization: `Bearer ${token}`, Origin: 'https://evil.example' })), /403|Forbidden|cross-origin/)
  })
})
