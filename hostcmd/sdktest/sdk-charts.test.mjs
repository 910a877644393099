// Charts, data and images through the official SDK: what kernelhost's python
// kernel environment (transports/kernelpy/_kernelhost/env.py) gives a cell's results, on
// every transport sdk_test.go runs this file against. The host's Python must
// have IPython, matplotlib, pandas and PIL (Debian's /usr/bin/python3 with
// python3-ipython python3-matplotlib python3-pandas python3-pil, which `make
// test` installs); where this machine has none, sdk_test.go sets
// KH_SDK_NO_IPYTHON=1 and these skip (never under CI, where it fails).
import { test as nodeTest, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

const skip = process.env.KH_SDK_NO_IPYTHON === '1' && 'the host has no Python with IPython, matplotlib, pandas and PIL'
const test = (name, fn) => nodeTest(name, { skip }, fn)

let sbx
let context // a context of this file's own: other files share the default one

before(async () => {
  if (skip) return
  sbx = await Sandbox.create()
  context = await sbx.createCodeContext({ language: 'python' })
})

after(async () => {
  if (skip) return
  await sbx.removeCodeContext(context)
})

async function run(code) {
  const exec = await sbx.runCode(code, { context })
  assert.equal(exec.error, undefined, `the cell failed: ${JSON.stringify(exec.error)}`)
  return exec
}

// The one result carrying a chart, with its png beside it.
async function chartOf(code) {
  const exec = await run(code)
  const charts = exec.results.filter((r) => r.chart)
  assert.equal(charts.length, 1, `want one chart, got results ${JSON.stringify(exec.results.map((r) => r.formats()))}`)
  const [result] = charts
  assert.ok(result.png && Buffer.from(result.png, 'base64').subarray(1, 4).toString() === 'PNG', 'a png beside the chart')
  assert.deepEqual(result.extra, {}) // chart is a field of its own, not an extra
  return result.chart
}

// The chart environment imports nothing itself; a context forked from the
// fork server's template (KH_SDK_PRELOADED: the plugin's default
// -python-preload=auto) starts with the data stack loaded.
test('nothing is imported until the cell imports it, unless the template preloaded it', async () => {
  const exec = await run("import sys\nsorted(m for m in ('matplotlib', 'pandas', 'PIL', 'numpy') if m in sys.modules)")
  assert.equal(exec.text, process.env.KH_SDK_PRELOADED ? "['PIL', 'matplotlib', 'numpy', 'pandas']" : '[]')
})

test('a line chart over datetimes: scales, ticks, labels, units, ISO points', async () => {
  const chart = await chartOf(`
import datetime
import matplotlib.pyplot as plt
days = [datetime.datetime(2024, 1, 1) + datetime.timedelta(days=i) for i in range(10)]
plt.plot(days, [20 + i for i in range(10)], label='Berlin')
plt.plot(days, [10 - i for i in range(10)], label='Oslo')
plt.title('Temperatures')
plt.xlabel('Date')
plt.ylabel('Temperature (°C)')
plt.show()
`)
  assert.equal(chart.type, 'line')
  assert.equal(chart.title, 'Temperatures')
  assert.equal(chart.x_label, 'Date')
  assert.equal(chart.x_unit, null)
  assert.equal(chart.y_label, 'Temperature (°C)')
  assert.equal(chart.y_unit, '°C')
  assert.equal(chart.x_scale, 'datetime')
  assert.equal(chart.y_scale, 'linear')
  assert.deepEqual(chart.elements.map((e) => e.label), ['Berlin', 'Oslo'])
  const berlin = chart.elements[0].points
  assert.equal(berlin.length, 10)
  assert.deepEqual(berlin[0], ['2024-01-01T00:00:00', 20])
  assert.deepEqual(berlin[9], ['2024-01-10T00:00:00', 29])
  assert.ok(chart.x_ticks.length > 1)
  for (const tick of chart.x_ticks) assert.match(tick, /^2024-01-\d\dT/)
  assert.equal(chart.x_tick_labels.length, chart.x_ticks.length)
  assert.ok(chart.y_ticks.every((t) => typeof t === 'number'))
  assert.equal(chart.y_tick_labels.length, chart.y_ticks.length)
})

test('a log-scale axis', async () => {
  const chart = await chartOf(`
import matplotlib.pyplot as plt
plt.plot([1, 2, 3, 4], [1, 10, 100, 1000])
plt.yscale('log')
plt.show()
`)
  assert.equal(chart.type, 'line')
  assert.equal(chart.y_scale, 'log')
  assert.equal(chart.x_scale, 'linear')
  assert.deepEqual(chart.y_ticks, [1, 10, 100, 1000])
  assert.deepEqual(chart.y_tick_labels, ['10^0', '10^1', '10^2', '10^3'])
  assert.deepEqual(chart.elements[0].points, [[1, 1], [2, 10], [3, 100], [4, 1000]])
})

test('a categorical axis', async () => {
  const chart = await chartOf(`
import matplotlib.pyplot as plt
plt.plot(['mon', 'tue', 'wed'], [3, 1, 2], label='visits')
plt.show()
`)
  assert.equal(chart.x_scale, 'categorical')
  assert.deepEqual(chart.x_ticks, ['mon', 'tue', 'wed'])
  assert.deepEqual(chart.x_tick_labels, ['mon', 'tue', 'wed'])
  assert.deepEqual(chart.elements, [{ label: 'visits', points: [['mon', 3], ['tue', 1], ['wed', 2]] }])
})

test('a scatter chart', async () => {
  const chart = await chartOf(`
import matplotlib.pyplot as plt
plt.scatter([1, 2, 3], [4, 5, 6], label='samples')
plt.xlabel('Length (cm)')
plt.show()
`)
  assert.equal(chart.type, 'scatter')
  assert.equal(chart.x_unit, 'cm')
  assert.deepEqual(chart.elements, [{ label: 'samples', points: [[1, 4], [2, 5], [3, 6]] }])
})

test('a grouped bar chart', async () => {
  const chart = await chartOf(`
import matplotlib.pyplot as plt
import numpy as np
x = np.arange(3)
plt.bar(x - 0.2, [20, 35, 30], 0.4, label='Men')
plt.bar(x + 0.2, [25, 32, 34], 0.4, label='Women')
plt.xticks(x, ['G1', 'G2', 'G3'])
plt.title('Scores by group')
plt.ylabel('Scores (points)')
plt.show()
`)
  assert.equal(chart.type, 'bar')
  assert.equal(chart.title, 'Scores by group')
  assert.equal(chart.y_unit, 'points')
  assert.deepEqual(chart.elements, [
    { label: 'G1', value: 20, group: 'Men' },
    { label: 'G2', value: 35, group: 'Men' },
    { label: 'G3', value: 30, group: 'Men' },
    { label: 'G1', value: 25, group: 'Women' },
    { label: 'G2', value: 32, group: 'Women' },
    { label: 'G3', value: 34, group: 'Women' },
  ])
})

test('a pie chart', async () => {
  const chart = await chartOf(`
import matplotlib.pyplot as plt
plt.pie([1, 2, 1], labels=['apples', 'pears', 'plums'])
plt.title('Fruit')
plt.show()
`)
  assert.equal(chart.type, 'pie')
  assert.equal(chart.title, 'Fruit')
  assert.deepEqual(chart.elements.map((e) => e.label), ['apples', 'pears', 'plums'])
  assert.deepEqual(chart.elements.map((e) => Math.round(e.angle)), [90, 180, 90])
  assert.ok(chart.elements.every((e) => e.radius === 1))
})

test('a box and whisker chart', async () => {
  const chart = await chartOf(`
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.boxplot([[1, 2, 3, 4, 5, 20], [2, 3, 4, 5, 6]], labels=['A', 'B'])
ax.set_ylabel('Time (ms)')
plt.show()
`)
  assert.equal(chart.type, 'box_and_whisker')
  assert.equal(chart.y_unit, 'ms')
  assert.deepEqual(chart.elements, [
    { label: 'A', min: 1, first_quartile: 2.25, median: 3.5, third_quartile: 4.75, max: 5, outliers: [20] },
    { label: 'B', min: 2, first_quartile: 3, median: 4, third_quartile: 5, max: 6, outliers: [] },
  ])
})

test('a superchart of two subplots', async () => {
  const chart = await chartOf(`
import matplotlib.pyplot as plt
fig, (left, right) = plt.subplots(1, 2)
left.plot([1, 2, 3], [1, 4, 9])
left.set_title('squares')
right.bar(['a', 'b'], [3, 5], label='counts')
right.set_title('counts')
fig.suptitle('Two views')
plt.show()
`)
  assert.equal(chart.type, 'superchart')
  assert.equal(chart.title, 'Two views')
  assert.deepEqual(chart.elements.map((c) => [c.type, c.title]), [['line', 'squares'], ['bar', 'counts']])
  assert.deepEqual(chart.elements[1].elements, [
    { label: 'a', value: 3, group: 'counts' },
    { label: 'b', value: 5, group: 'counts' },
  ])
})

test('a DataFrame gives data and html', async () => {
  const exec = await run(`
import pandas as pd
pd.DataFrame({'city': ['Berlin', 'Oslo'], 'temp': [21.5, None], 'when': pd.to_datetime(['2024-01-01', '2024-01-02'])})
`)
  const [result] = exec.results
  assert.equal(result.isMainResult, true)
  assert.deepEqual(result.data, {
    city: ['Berlin', 'Oslo'],
    temp: [21.5, null],
    when: ['2024-01-01T00:00:00.000', '2024-01-02T00:00:00.000'],
  })
  assert.match(result.html, /<table/)
  assert.ok(result.formats().includes('data'))
})

test('PIL images: show() displays a png, and so does a last value', async () => {
  const exec = await run(`
from PIL import Image
img = Image.new('RGB', (8, 4), 'red')
img.show()
img
`)
  assert.equal(exec.results.length, 2)
  for (const r of exec.results) {
    const png = Buffer.from(r.png, 'base64')
    assert.equal(png.subarray(1, 4).toString(), 'PNG')
    assert.equal(png.readUInt32BE(16), 8) // IHDR width
  }
  assert.deepEqual(exec.results.map((r) => r.isMainResult), [false, true])
})

test('dicts and lists come as JSON', async () => {
  const dict = await run("{'a': [1, 2.5, None], 'b': 'x'}")
  assert.deepEqual(dict.results[0].json, { a: [1, 2.5, null], b: 'x' })
  const list = await run("[1, {'k': True}]")
  assert.deepEqual(list.results[0].json, [1, { k: true }])
  const notJSON = await run('{1: {2, 3}}')
  assert.equal(notJSON.results[0].json, undefined)
  assert.equal(notJSON.results[0].text, '{1: {2, 3}}')
})

test('a figure with no data still shows, with an empty chart (as upstream)', async () => {
  const exec = await run(`
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.text(0.5, 0.5, 'hello')
plt.show()
`)
  assert.equal(exec.results.length, 1)
  assert.ok(exec.results[0].png)
  assert.deepEqual(exec.results[0].chart, {})
})

// Upstream's own pie test: matplotlib's float32 noise (323.99999141693115)
// does not reach the angles.
test('pie angles are whole where the shares are', async () => {
  const chart = await chartOf(`
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(8, 8))
ax.pie([90, 10], labels=['No', 'No, in blue'], autopct='%1.1f%%', startangle=90)
ax.axis('equal')
plt.title('Will I wake up early tomorrow?')
plt.show()
`)
  assert.deepEqual(chart.elements, [
    { label: 'No', angle: 324, radius: 1 },
    { label: 'No, in blue', angle: 36, radius: 1 },
  ])
})

test('an image saved to a file is displayed, and so is a saved figure', async () => {
  const saved = await run(`
import os, tempfile
from PIL import Image
Image.new('RGBA', (16, 16), 'blue').save(os.path.join(tempfile.mkdtemp(), 'test.png'))
`)
  assert.equal(saved.results.length, 1)
  assert.equal(Buffer.from(saved.results[0].png, 'base64').readUInt32BE(16), 16) // IHDR width
  const figure = await run(`
import os, tempfile
import matplotlib.pyplot as plt
plt.plot([1, 2, 3])
plt.savefig(os.path.join(tempfile.mkdtemp(), 'out.png'))
plt.show()
`)
  assert.deepEqual(figure.results.map((r) => [Boolean(r.png), r.chart?.type]), [[true, undefined], [true, 'line']])
})
